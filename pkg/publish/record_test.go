package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

const maxObjectBytes = 1 << 20 // what the hub's etcd stores in one object (a Secret's data is refused above it)

func secretBytes(s *corev1.Secret) int {
	n := len(s.Name)
	for k, v := range s.Data {
		n += len(k) + len(v)
	}
	return n
}

// At the project's scale target every published gateway still has its
// record, each in an object of constant size; the same records in one
// object (the design before) would not fit.
func TestRecordsAtScale(t *testing.T) {
	const n = 10000
	ctx := context.Background()
	// The simple clientset: the other's field tracking takes a minute here.
	client := fake.NewSimpleClientset() //nolint:staticcheck
	r := &records{client: client, namespace: "gw"}
	if err := r.load(ctx); err != nil {
		t.Fatal(err)
	}
	all := map[string]Record{}
	for i := range n {
		gw := fmt.Sprintf("cluster-%05d.region-%02d.fleet.example.com", i, i%50)
		rec := Record{Namespace: "fleet", Name: gw, UID: types.UID(fmt.Sprintf("0b7e1c52-%04d-4f7a-9c3e-%012d", i%10000, i)), Owned: i%2 == 0}
		if !rec.Owned {
			rec.Namespace, rec.Name = "inventory", fmt.Sprintf("profile-%05d", i)
		}
		if err := r.set(ctx, gw, &rec); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		all[gw] = rec
	}
	if one, _ := json.Marshal(all); len(one) <= maxObjectBytes {
		t.Fatalf("the premise: %d records in one object are %d bytes, want more than %d", n, len(one), maxObjectBytes)
	}
	list, err := client.CoreV1().Secrets("gw").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != n {
		t.Fatalf("%d record Secrets, want one per gateway (%d)", len(list.Items), n)
	}
	largest := 0
	for i := range list.Items {
		largest = max(largest, secretBytes(&list.Items[i]))
	}
	if largest > 1024 {
		t.Errorf("the largest record Secret holds %d bytes, want at most 1 KiB whatever the number of gateways", largest)
	}
	fresh := &records{client: client, namespace: "gw"}
	if err := fresh.load(ctx); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fresh.byGW, all) {
		t.Fatalf("reloaded %d records, want the %d written", len(fresh.byGW), len(all))
	}
	for gw, rec := range all {
		if fresh.owns(rec.Namespace, rec.Name, rec.UID) != rec.Owned || r.owns(rec.Namespace, rec.Name, rec.UID) != rec.Owned {
			t.Fatalf("record of %s %+v: owned %v (written), %v (reloaded)", gw, rec, r.owns(rec.Namespace, rec.Name, rec.UID), fresh.owns(rec.Namespace, rec.Name, rec.UID))
		}
	}
	gw := "cluster-00042.region-42.fleet.example.com"
	if err := fresh.set(ctx, gw, nil); err != nil {
		t.Fatal(err)
	}
	if rec := all[gw]; fresh.owns(rec.Namespace, rec.Name, rec.UID) {
		t.Errorf("a withdrawn record is still owned")
	}
	if list, _ := client.CoreV1().Secrets("gw").List(ctx, metav1.ListOptions{}); len(list.Items) != n-1 {
		t.Errorf("%d record Secrets after withdrawing one, want %d", len(list.Items), n-1)
	}
}

// ClusterGateways named like the record Secret of the design before, like
// the records' name prefix, and like the very name a new record draws,
// neither stop the publisher nor are touched by it; a Secret labelled as a
// record but not of the record type is not a record.
func TestRecordsIgnoreGatewaysOfReservedNames(t *testing.T) {
	ctx := context.Background()
	gateway := func(name string) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "gw", Labels: map[string]string{gateways.LabelGateway: "true"}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{gateways.KeyEndpoint: []byte("https://127.0.0.1:1"), recordKeyGateway: []byte("c1")},
		}
	}
	drawn := recordNamePrefix + "0000000000000000"
	forged := gateway("forged")
	forged.Labels = map[string]string{LabelRecord: "true"}
	forged.Data = map[string][]byte{recordKeyGateway: []byte("c1"), recordKeyPublished: []byte(`{"namespace":"fleet","name":"victim","uid":"u-victim","owned":true}`)}
	objs := []*corev1.Secret{gateway("cluster-gateway-published-profiles"), gateway(recordNamePrefix), gateway(drawn), forged}
	client := fake.NewClientset()
	for _, o := range objs {
		if _, err := client.CoreV1().Secrets("gw").Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := client.CoreV1().Secrets("gw").List(ctx, metav1.ListOptions{})

	draws := 0
	defer func(orig func() (string, error)) { recordName = orig }(recordName)
	recordName = func() (string, error) {
		draws++
		if draws == 1 {
			return drawn, nil // the gateway has it
		}
		return fmt.Sprintf("%s%016d", recordNamePrefix, draws), nil
	}

	r := &records{client: client, namespace: "gw"}
	if err := r.load(ctx); err != nil {
		t.Fatalf("load: %v", err)
	}
	if r.owns("fleet", "victim", "u-victim") || len(r.gateways()) != 0 {
		t.Fatalf("a Secret of another type labelled as a record is a record: %v", r.byGW)
	}
	rec := Record{Namespace: "fleet", Name: "c1", UID: "u1", Owned: true}
	if err := r.set(ctx, "c1", &rec); err != nil {
		t.Fatalf("set: %v", err)
	}
	if draws != 2 {
		t.Errorf("%d names drawn, want a second after the first was a gateway's", draws)
	}
	fresh := &records{client: client, namespace: "gw"}
	if err := fresh.load(ctx); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fresh.byGW, map[string]Record{"c1": rec}) || !fresh.owns("fleet", "c1", "u1") {
		t.Errorf("reloaded %v, want only the publisher's record of c1", fresh.byGW)
	}
	for _, b := range before.Items {
		a, err := client.CoreV1().Secrets("gw").Get(ctx, b.Name, metav1.GetOptions{})
		if err != nil || a.ResourceVersion != b.ResourceVersion || !reflect.DeepEqual(a.Data, b.Data) || a.Type != b.Type {
			t.Errorf("Secret %s was touched by the publisher (%v)", b.Name, err)
		}
	}
	if err := fresh.set(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	for _, b := range before.Items {
		if _, err := client.CoreV1().Secrets("gw").Get(ctx, b.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("withdrawing c1's record removed Secret %s: %v", b.Name, err)
		}
	}
}
