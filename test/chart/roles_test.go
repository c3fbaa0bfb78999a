package chart

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The shipped proxy roles grant clustersets/proxy with exactly the verbs
// they grant on clustergateways/proxy: a set adds no cluster (each of its
// clusters is authorized one by one as clustergateways/proxy), so a user
// who may reach clusters one at a time may read them as a set. The chart's
// roles equal these (TestChartRendersConfig).
func TestProxyRolesGrantSetsAsClusters(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(configDir, "user-roles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	granted := map[string]int{}
	for _, doc := range strings.Split(string(b), "\n---") {
		var role struct {
			Metadata struct{ Name string }
			Rules    []struct {
				APIGroups []string `json:"apiGroups"`
				Resources []string
				Verbs     []string
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
			t.Fatal(err)
		}
		verbs := map[string][]string{}
		for _, r := range role.Rules {
			if !slices.Contains(r.APIGroups, "gateway.clustergateway.io") {
				continue
			}
			for _, res := range r.Resources {
				verbs[res] = append(verbs[res], r.Verbs...)
			}
		}
		one, set := verbs["clustergateways/proxy"], verbs["clustersets/proxy"]
		slices.Sort(one)
		slices.Sort(set)
		if !slices.Equal(one, set) {
			t.Errorf("%s: clustergateways/proxy %v, clustersets/proxy %v: want the same verbs", role.Metadata.Name, one, set)
		}
		if slices.Contains(set, "get") {
			granted[role.Metadata.Name]++
		}
	}
	for _, name := range []string{"cluster-gateway:proxy", "cluster-gateway:proxy-reader"} {
		if granted[name] == 0 {
			t.Errorf("%s does not grant get on clustersets/proxy", name)
		}
	}
}
