package chart

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// konnectivityServer runs the proxy-servers: a StatefulSet (two replicas by
// default, --server-count matching, each its own id from its pod name), a
// headless Service through which the gateway is given every pod by its
// stable name, and one Service for the agents. Addresses given explicitly
// win over the generated ones.
func TestChartKonnectivityServer(t *testing.T) {
	sts := release + "-konnectivity"
	if _, ok := helmTemplate(t)["StatefulSet/"+namespace+"/"+sts]; ok {
		t.Fatal("proxy-servers rendered although konnectivityServer.enabled is false")
	}
	on := []string{"konnectivityServer.enabled=true", "konnectivityServer.secretName=cgw-konnectivity-server",
		"gateway.konnectivity.enabled=true", "gateway.konnectivity.secretName=cgw-konnectivity-client"}
	addresses := func(n int) string {
		var as []string
		for i := range n {
			as = append(as, fmt.Sprintf("%s-%d.%s.%s.svc:8090", sts, i, sts, namespace))
		}
		return "--konnectivity-server-address=" + strings.Join(as, ",")
	}

	for _, c := range []struct {
		set      []string
		replicas int
		gateway  string // the gateway's address flag
	}{
		{on, 2, addresses(2)},
		{append(on, "konnectivityServer.replicas=3"), 3, addresses(3)},
		{append(on, "gateway.konnectivity.serverAddresses={a.example:8090,b.example:8090}"), 2, "--konnectivity-server-address=a.example:8090,b.example:8090"},
	} {
		objs := helmTemplate(t, c.set...)
		s := objs["StatefulSet/"+namespace+"/"+sts]
		if s == nil {
			t.Fatalf("%v: no StatefulSet %s in %v", c.set, sts, keys(objs))
		}
		if field(t, s, "spec", "replicas") != float64(c.replicas) || field(t, s, "spec", "serviceName") != sts {
			t.Errorf("%v: replicas %v, serviceName %v", c.set, field(t, s, "spec", "replicas"), field(t, s, "spec", "serviceName"))
		}
		ps := field(t, s, "spec", "template", "spec").(object)
		ctr := ps["containers"].([]any)[0].(object)
		var sargs []string
		for _, a := range ctr["args"].([]any) {
			sargs = append(sargs, a.(string))
		}
		if !slices.Contains(sargs, fmt.Sprintf("--server-count=%d", c.replicas)) || !slices.Contains(sargs, "--proxy-strategies=destHost") {
			t.Errorf("%v: proxy-server args %v", c.set, sargs)
		}
		if env := fmt.Sprint(ctr["env"]); !strings.Contains(env, "PROXY_SERVER_ID") || !strings.Contains(env, "metadata.name") {
			t.Errorf("%v: each proxy-server needs its own id from its pod name: env %v", c.set, env)
		}
		if !strings.Contains(fmt.Sprint(ps["volumes"]), "cgw-konnectivity-server") {
			t.Errorf("%v: the proxy-servers' Secret is not mounted: %v", c.set, ps["volumes"])
		}
		headless := objs["Service/"+namespace+"/"+sts]
		if headless == nil || field(t, headless, "spec", "clusterIP") != "None" || field(t, headless, "spec", "publishNotReadyAddresses") != true {
			t.Errorf("%v: headless Service %v", c.set, headless)
		}
		if agents := objs["Service/"+namespace+"/"+sts+"-agents"]; agents == nil || field(t, agents, "spec", "type") != "LoadBalancer" {
			t.Errorf("%v: agents' Service %v", c.set, agents)
		}
		sel := fmt.Sprint(field(t, s, "spec", "selector", "matchLabels"))
		if gw := fmt.Sprint(field(t, objs["Deployment/"+namespace+"/"+release], "spec", "selector", "matchLabels")); sel == gw {
			t.Errorf("%v: proxy-servers and gateway share the selector %s", c.set, sel)
		}
		if got := args(t, objs); !slices.Contains(got, c.gateway) {
			t.Errorf("%v: gateway args %v, want %s", c.set, got, c.gateway)
		}
	}

	if _, err := helmTemplateErr(t, "konnectivityServer.enabled=true"); err == nil || !strings.Contains(err.Error(), "konnectivityServer.enabled needs konnectivityServer.secretName") {
		t.Errorf("konnectivityServer without a Secret: err %v", err)
	}
}
