package clustergateway

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// tableConvertor prints the columns `kubectl get clustergateways` shows.
type tableConvertor struct{}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the gateway: the managed cluster's name on the hub"},
	{Name: "Endpoint", Type: "string", Description: "How the cluster is reached: Direct or Konnectivity"},
	{Name: "Address", Type: "string", Description: "The cluster's API server address"},
	{Name: "Credential", Type: "string", Description: "How the gateway authenticates: X509Certificate or BearerToken"},
	{Name: "Ready", Type: "string", Description: "Whether the stored endpoint and credential are usable"},
	{Name: "Age", Type: "string", Description: "Time since the gateway was created"},
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
		ready := "Unknown"
		if c := meta.FindStatusCondition(gw.Status.Conditions, v1alpha1.ConditionReady); c != nil {
			ready = string(c.Status)
		}
		age := "<unknown>"
		if !gw.CreationTimestamp.IsZero() {
			age = duration.HumanDuration(metav1.Now().Sub(gw.CreationTimestamp.Time))
		}
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells:  []interface{}{gw.Name, string(gw.Spec.Endpoint.Type), gw.Spec.Endpoint.Address, string(gw.Spec.Credential.Type), ready, age},
			Object: runtime.RawExtension{Object: gw},
		})
	}
	return table, nil
}
