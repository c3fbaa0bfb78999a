package publish

import (
	"encoding/json"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

func profileWith(t *testing.T, status string) *unstructured.Unstructured {
	t.Helper()
	u := newProfile("fleet", "c1")
	u.SetResourceVersion("7")
	if status != "" {
		var st map[string]any
		if err := json.Unmarshal([]byte(status), &st); err != nil {
			t.Fatal(err)
		}
		u.Object["status"] = st
	}
	return u
}

// apply applies ops as the hub would and returns the patched status.
func apply(t *testing.T, u *unstructured.Unstructured, ops []op) map[string]any {
	t.Helper()
	doc, _ := json.Marshal(u.Object)
	patch, _ := json.Marshal(ops)
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	var m map[string]any
	_ = json.Unmarshal(out, &m)
	st, _ := m["status"].(map[string]any)
	return st
}

const other = `{"name":"ocm","cluster":{"server":"https://x:1","extensions":[{"name":"a","extension":{"z":1,"b":[2,1]}}]}}`

// The gateway's entry is added, updated and removed; another provider's
// entry, before or after it, stays exactly as it was (compared as JSON), and
// an unchanged entry needs no write.
func TestStatusOpsKeepOtherEntries(t *testing.T) {
	want := entry("cluster-gateway", "https://hub:6443", []byte("CA"), "c1")
	for _, tc := range []struct{ name, status string }{
		{"no status", ""},
		{"other before", `{"accessProviders":[` + other + `]}`},
		{"other before and a stale own entry after", `{"accessProviders":[` + other + `,{"name":"cluster-gateway","cluster":{"server":"https://evil"}}]}`},
		{"own entry before other", `{"accessProviders":[{"name":"cluster-gateway","cluster":{"server":"https://old"}},` + other + `]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := profileWith(t, tc.status)
			ops := statusOps(u, "cluster-gateway", want, nil, "")
			if len(ops) == 0 || ops[0].Path != "/metadata/resourceVersion" || ops[0].Value != "7" {
				t.Fatalf("ops %+v: want the resourceVersion precondition first", ops)
			}
			st := apply(t, u, ops)
			aps, _ := st["accessProviders"].([]any)
			var mine, theirs int
			for _, e := range aps {
				m := e.(map[string]any)
				switch m["name"] {
				case "cluster-gateway":
					mine++
					if !sameJSON(m, want) {
						t.Errorf("own entry %v, want %v", m, want)
					}
				case "ocm":
					theirs++
					var o any
					_ = json.Unmarshal([]byte(other), &o)
					if !sameJSON(m, o) {
						t.Errorf("other entry changed: %v", m)
					}
				}
			}
			if mine != 1 || (tc.status != "" && theirs != 1) {
				t.Errorf("entries %v: want exactly one own entry and the other kept", aps)
			}
			u.Object["status"] = st
			if again := statusOps(u, "cluster-gateway", want, nil, ""); again != nil {
				t.Errorf("unchanged: ops %+v, want none", again)
			}
			gone := apply(t, u, statusOps(u, "cluster-gateway", nil, nil, ""))
			for _, e := range gone["accessProviders"].([]any) {
				if e.(map[string]any)["name"] == "cluster-gateway" {
					t.Errorf("own entry not removed: %v", gone)
				}
			}
		})
	}
}

// The condition and the version are written when their status, reason or
// version changes, not for a reworded message; other conditions are kept.
func TestStatusOpsCondition(t *testing.T) {
	want := entry("cluster-gateway", "https://hub", nil, "c1")
	u := profileWith(t, `{"conditions":[{"type":"Joined","status":"True","reason":"X","message":"m","lastTransitionTime":"2026-01-01T00:00:00Z"}]}`)
	cond := map[string]any{"type": ConditionHealthy, "status": "False", "reason": "DialFailed", "message": "refused", "lastTransitionTime": "2026-01-02T00:00:00Z"}
	st := apply(t, u, statusOps(u, "cluster-gateway", want, cond, "v1.37.2"))
	if v, _, _ := unstructured.NestedString(st, "version", "kubernetes"); v != "v1.37.2" {
		t.Errorf("version %q", v)
	}
	if n := len(st["conditions"].([]any)); n != 2 {
		t.Errorf("conditions %v: want Joined kept and ControlPlaneHealthy added", st["conditions"])
	}
	u.Object["status"] = st
	reworded := map[string]any{"type": ConditionHealthy, "status": "False", "reason": "DialFailed", "message": "refused again", "lastTransitionTime": "x"}
	if ops := statusOps(u, "cluster-gateway", want, reworded, "v1.37.2"); ops != nil {
		t.Errorf("reworded message: ops %+v, want none", ops)
	}
	healthy := map[string]any{"type": ConditionHealthy, "status": "True", "reason": "Reachable", "message": "ok", "lastTransitionTime": "y"}
	st = apply(t, u, statusOps(u, "cluster-gateway", want, healthy, "v1.37.2"))
	for _, c := range st["conditions"].([]any) {
		if m := c.(map[string]any); m["type"] == ConditionHealthy && m["status"] != "True" {
			t.Errorf("condition %v, want True", m)
		}
	}
}

// The entry carries the hub's proxy path and CA and nothing else.
func TestEntry(t *testing.T) {
	e := entry("cluster-gateway", "https://hub:6443/prefix", []byte("PEM"), "c1")
	b, _ := json.Marshal(e)
	if string(b) != `{"cluster":{"certificate-authority-data":"UEVN","server":"https://hub:6443/prefix/apis/gateway.clustergateway.io/v1alpha1/clustergateways/c1/proxy"},"name":"cluster-gateway"}` {
		t.Errorf("entry %s", b)
	}
}

// Only a profile recorded as created, by namespace, name and UID, is owned:
// an entry write (not owned) or another UID of that name is not.
func TestOwns(t *testing.T) {
	r := &records{byGW: map[string]Record{
		"c1": {Namespace: "fleet", Name: "c1", UID: "u1", Owned: true},
		"s1": {Namespace: "inv", Name: "p1", UID: "u2"},
	}}
	for _, tc := range []struct {
		ns, name string
		uid      types.UID
		want     bool
	}{
		{"fleet", "c1", "u1", true},
		{"fleet", "c1", "forged-recreated", false},
		{"other", "c1", "u1", false},
		{"inv", "p1", "u2", false},
	} {
		if got := r.owns(tc.ns, tc.name, tc.uid); got != tc.want {
			t.Errorf("owns(%s/%s %s) = %v, want %v", tc.ns, tc.name, tc.uid, got, tc.want)
		}
	}
}
