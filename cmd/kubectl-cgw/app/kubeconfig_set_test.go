package app

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeconfig -l writes one context, named after the set, whose server is the
// set's proxy on the hub (a prefixed key's '/' written '~'), with the hub's
// user; contradicting selections are refused before anything is written.
func TestKubeconfigForASet(t *testing.T) {
	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	root := NewCommand(streams)
	root.SetArgs([]string{"--server", "https://hub.example:6443", "--token", "hub-token", "kubeconfig", "-l", "example.com/tier=gold,env in (prod)"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(out.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	const set = "labels:example.com~tier=gold,env in (prod)"
	if kc.CurrentContext != set || len(kc.Contexts) != 1 || len(kc.AuthInfos) != 1 {
		t.Fatalf("current %q, contexts %v, users %v; want the one context %q", kc.CurrentContext, sortedKeys(kc.Contexts), sortedKeys(kc.AuthInfos), set)
	}
	want := "https://hub.example:6443/apis/gateway.clustergateway.io/v1alpha1/clustersets/labels:example.com~tier=gold%2Cenv%20in%20%28prod%29/proxy"
	if got := kc.Clusters[kc.Contexts[set].Cluster].Server; got != want {
		t.Errorf("server %s, want %s", got, want)
	}
	if u := kc.AuthInfos[kc.Contexts[set].AuthInfo]; u == nil || u.Token != "hub-token" {
		t.Errorf("user %+v, want the hub's token", u)
	}

	for _, args := range [][]string{
		{"kubeconfig", "-l", "env=prod", "c1"},
		{"kubeconfig", "-l", "env=prod", "--all"},
		{"kubeconfig", "--set"},
		{"kubeconfig", "--set", "--all"},
		{"kubeconfig", "-l", "env in ("},
	} {
		var stdout bytes.Buffer
		root := NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &stdout, ErrOut: &bytes.Buffer{}})
		root.SetArgs(append([]string{"--server", "https://hub.example:6443", "--token", "t"}, args...))
		if err := root.Execute(); err == nil || stdout.Len() > 0 {
			t.Errorf("%v: err %v, stdout %q; want refused, nothing written", args, err, stdout.String())
		}
	}
}
