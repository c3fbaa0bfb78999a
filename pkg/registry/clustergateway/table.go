package clustergateway

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// tableConvertor prints the columns `kubectl get clustergateways` shows.
type tableConvertor struct{}

// columns are what `kubectl get clustergateways` prints; those of priority 1
// only with -o wide.
var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the gateway: the managed cluster's name on the hub"},
	{Name: "Endpoint", Type: "string", Description: "How the cluster is reached: Direct or Konnectivity"},
	{Name: "Address", Type: "string", Description: "The cluster's API server address"},
	{Name: "Credential", Type: "string", Description: "How the gateway authenticates: X509Certificate, BearerToken, SecretRef or Provider"},
	{Name: "Ready", Type: "string", Description: "Whether the stored endpoint and credential are usable"},
	{Name: "Reachable", Type: "string", Description: "Whether the cluster answers the gateway's probes (True, False, Unknown)"},
	{Name: "Age", Type: "string", Description: "Time since the gateway was created"},
	{Name: "Reason", Type: "string", Priority: 1, Description: "Why the cluster is reachable or not, from the last probe"},
	{Name: "Version", Type: "string", Priority: 1, Description: "The cluster's Kubernetes version, from its /version"},
	{Name: "Latency", Type: "string", Priority: 1, Description: "How long the last good probe took"},
	{Name: "Server Name", Type: "string", Priority: 1, Description: "The name the cluster's certificate is verified against, if not the address's host"},
	{Name: "Proxy", Type: "string", Priority: 1, Description: "The forward proxy the cluster is dialed through (without its credentials)"},
	{Name: "Cert Expiry", Type: "string", Priority: 1, Description: "When the credential expires, where known: a client certificate's notAfter, a JWT's exp, an ExecCredential's expirationTimestamp"},
}

func (tableConvertor) ConvertToTable(_ context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{}
	if opts, ok := tableOptions.(*metav1.TableOptions); !ok || !opts.NoHeaders {
		table.ColumnDefinitions = columns
	}
	var items []v1alpha1.ClusterGateway
	switch t := obj.(type) {
	case *v1alpha1.ClusterGateway:
		items = []v1alpha1.ClusterGateway{*t}
	case *v1alpha1.ClusterGatewayList:
		items = t.Items
		table.ResourceVersion, table.Continue, table.RemainingItemCount = t.ResourceVersion, t.Continue, t.RemainingItemCount
	default:
		return nil, fmt.Errorf("cannot print %T as a table", obj)
	}
	if m, err := meta.ListAccessor(obj); err == nil && table.ResourceVersion == "" {
		table.ResourceVersion = m.GetResourceVersion()
	}
	for i := range items {
		gw := &items[i]
		ready, reachable, reason := "Unknown", "Unknown", "<none>"
		if c := meta.FindStatusCondition(gw.Status.Conditions, v1alpha1.ConditionReady); c != nil {
			ready = string(c.Status)
		}
		if c := meta.FindStatusCondition(gw.Status.Conditions, v1alpha1.ConditionReachable); c != nil {
			reachable, reason = string(c.Status), c.Reason
		}
		age := "<unknown>"
		if !gw.CreationTimestamp.IsZero() {
			age = duration.HumanDuration(metav1.Now().Sub(gw.CreationTimestamp.Time))
		}
		version, latency, expiry := "<none>", "<none>", "<none>"
		if r := gw.Status.Reachability; r != nil {
			if r.ServerVersion != "" {
				version = r.ServerVersion
			}
			if r.Latency != nil {
				latency = r.Latency.Duration.String()
			}
		}
		if c := gw.Status.Credential; c != nil && c.ExpirationTime != nil {
			expiry = c.ExpirationTime.UTC().Format(time.RFC3339)
		}
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells: []interface{}{gw.Name, string(gw.Spec.Endpoint.Type), gw.Spec.Endpoint.Address, string(gw.Spec.Credential.Type), ready, reachable, age,
				reason, version, latency, orNone(gw.Spec.Endpoint.ServerName), orNone(gw.Spec.Endpoint.ProxyURL), expiry},
			Object: runtime.RawExtension{Object: gw},
		})
	}
	return table, nil
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
