package publish

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/health"
)

// What a profile the publisher creates says about its manager.
const (
	ClusterManagerName  = "cluster-gateway"
	LabelClusterManager = "x-k8s.io/cluster-manager"
	ConditionHealthy    = "ControlPlaneHealthy"
	maxMessage          = 4096
)

// entry is the gateway's access provider entry for the gateway name: the
// hub's proxy path for it and the hub CA. Nothing secret: consumers bring
// their own hub identity.
func entry(provider, hub string, ca []byte, name string) map[string]any {
	cluster := map[string]any{"server": hub + "/apis/" + v1alpha1.GroupName + "/v1alpha1/clustergateways/" + name + "/proxy"}
	if len(ca) > 0 {
		cluster["certificate-authority-data"] = base64.StdEncoding.EncodeToString(ca)
	}
	return map[string]any{"name": provider, "cluster": cluster}
}

// condition is ControlPlaneHealthy as the prober knows the cluster (ok
// false: not probed yet).
func condition(r health.Result, ok bool, gw string) map[string]any {
	c := map[string]any{"type": ConditionHealthy}
	if !ok {
		c["status"], c["reason"] = string(metav1.ConditionUnknown), v1alpha1.ReasonNotProbed
		c["message"] = "the gateway has not probed the cluster yet"
		c["lastTransitionTime"] = time.Now().UTC().Format(time.RFC3339)
		return c
	}
	msg := r.Message
	if r.Status != metav1.ConditionTrue {
		msg += "; see kubectl get clustergateway " + gw + " -o yaml and its health subresource"
	}
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	c["status"], c["reason"], c["message"] = string(r.Status), r.Reason, msg
	c["lastTransitionTime"] = r.LastTransitionTime.UTC().Format(time.RFC3339)
	return c
}

// op is one JSON patch operation (RFC 6902).
type op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// statusOps are the operations that make p's status hold want as its
// provider's entry (nil: no entry, remove it), and, when cond is not nil,
// the condition of its type and the version. Other access providers'
// entries and other conditions are never in an operation: they stay as
// they are. No operation: p is already so. The first operation, when there
// is any, replaces metadata.resourceVersion with p's own, which makes the
// patch fail with a conflict if p changed since it was read.
func statusOps(p *unstructured.Unstructured, provider string, want map[string]any, cond map[string]any, version string) []op {
	var ops []op
	status, hasStatus := p.Object["status"].(map[string]any)
	ensureStatus := func() {
		if !hasStatus {
			ops = append(ops, op{Op: "add", Path: "/status", Value: map[string]any{}})
			status, hasStatus = map[string]any{}, true
		}
	}
	aps, hasAPs := status["accessProviders"].([]any)
	i := slices.IndexFunc(aps, func(e any) bool { m, _ := e.(map[string]any); return m != nil && m["name"] == provider })
	switch {
	case want == nil && i >= 0:
		ops = append(ops, op{Op: "remove", Path: "/status/accessProviders/" + itoa(i)})
	case want == nil:
	case i >= 0 && sameJSON(aps[i], want):
	case i >= 0:
		ops = append(ops, op{Op: "replace", Path: "/status/accessProviders/" + itoa(i), Value: want})
	case hasAPs:
		ops = append(ops, op{Op: "add", Path: "/status/accessProviders/-", Value: want})
	default:
		ensureStatus()
		ops = append(ops, op{Op: "add", Path: "/status/accessProviders", Value: []any{want}})
	}
	if cond != nil {
		conds, hasConds := status["conditions"].([]any)
		j := slices.IndexFunc(conds, func(e any) bool { m, _ := e.(map[string]any); return m != nil && m["type"] == cond["type"] })
		switch {
		case j >= 0 && sameCondition(conds[j], cond):
		case j >= 0:
			ops = append(ops, op{Op: "replace", Path: "/status/conditions/" + itoa(j), Value: cond})
		case hasConds:
			ops = append(ops, op{Op: "add", Path: "/status/conditions/-", Value: cond})
		default:
			ensureStatus()
			ops = append(ops, op{Op: "add", Path: "/status/conditions", Value: []any{cond}})
		}
		have, _, _ := unstructured.NestedString(p.Object, "status", "version", "kubernetes")
		if version != "" && have != version {
			ensureStatus()
			ops = append(ops, op{Op: "add", Path: "/status/version", Value: map[string]any{"kubernetes": version}})
		}
	}
	if len(ops) == 0 {
		return nil
	}
	return append([]op{{Op: "replace", Path: "/metadata/resourceVersion", Value: p.GetResourceVersion()}}, ops...)
}

// sameCondition: a condition is rewritten when its status or reason
// changes, not for each new wording of a message, so that an unchanged
// cluster causes no write.
func sameCondition(have any, want map[string]any) bool {
	h, _ := have.(map[string]any)
	return h != nil && h["status"] == want["status"] && h["reason"] == want["reason"]
}

// sameJSON compares as JSON (an entry read from the hub against one built here).
func sameJSON(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil {
		return false
	}
	var x, y any
	_ = json.Unmarshal(ja, &x)
	_ = json.Unmarshal(jb, &y)
	return reflect.DeepEqual(x, y)
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// markOps are the operations that put back on an owned profile the marks
// the publisher created it with, the x-k8s.io/cluster-manager label and
// spec.clusterManager, when a ClusterProfile writer changed or removed
// them (no operation: they are as created). Nothing else of the metadata
// or spec is in an operation. Like statusOps', the first operation is the
// resourceVersion precondition.
func markOps(p *unstructured.Unstructured) []op {
	var ops []op
	if v, ok := p.GetLabels()[LabelClusterManager]; !ok || v != ClusterManagerName {
		if p.GetLabels() == nil {
			ops = append(ops, op{Op: "add", Path: "/metadata/labels", Value: map[string]any{LabelClusterManager: ClusterManagerName}})
		} else {
			// "add" sets a member whether or not it exists (RFC 6902 4.1).
			ops = append(ops, op{Op: "add", Path: "/metadata/labels/" + escapePointer(LabelClusterManager), Value: ClusterManagerName})
		}
	}
	want := map[string]any{"name": ClusterManagerName}
	if have, ok := p.Object["spec"].(map[string]any); !ok {
		ops = append(ops, op{Op: "add", Path: "/spec", Value: map[string]any{"clusterManager": want}})
	} else if !sameJSON(have["clusterManager"], want) {
		ops = append(ops, op{Op: "add", Path: "/spec/clusterManager", Value: want})
	}
	if len(ops) == 0 {
		return nil
	}
	return append([]op{{Op: "replace", Path: "/metadata/resourceVersion", Value: p.GetResourceVersion()}}, ops...)
}

// escapePointer escapes a JSON pointer's reference token (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// newProfile is the profile the publisher creates for a gateway (its
// status is written afterwards, through the status subresource).
func newProfile(namespace, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
		"metadata": map[string]any{"namespace": namespace, "name": name, "labels": map[string]any{LabelClusterManager: ClusterManagerName}},
		"spec":     map[string]any{"displayName": name, "clusterManager": map[string]any{"name": ClusterManagerName}},
	}}
}
