package app

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// conditionReachable is the condition a health check reports; this command
// only reads it, generically from status.conditions, when gateways have it.
const conditionReachable = "Reachable"

func newListCommand(h *hub) *cobra.Command {
	var selector string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the clusters registered with the hub",
		Long: `List the ClusterGateways on the hub: how each cluster is reached (ENDPOINT Direct or
Konnectivity, ADDRESS), with which kind of credential, and whether the stored endpoint and
credential are usable (READY). When the gateways report reachability (a status condition
of type Reachable), a REACHABLE column shows it. Credentials are never shown: the API
does not return them.

Needs get and list on clustergateways on the hub (the ClusterRole cluster-gateway:viewer).`,
		Example: `  kubectl cgw list
  kubectl cgw list -l env=prod
  kubectl cgw list --context other-hub`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := h.client()
			if err != nil {
				return err
			}
			list, err := c.GatewayV1alpha1().ClusterGateways().List(cmd.Context(), metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return hubError("list ClusterGateways", err)
			}
			if len(list.Items) == 0 {
				fmt.Fprintln(h.streams.ErrOut, "No ClusterGateways on the hub; register a cluster with `kubectl cgw join`.")
				return nil
			}
			return printList(h.streams.Out, list.Items)
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "Only gateways whose labels match this selector (e.g. env=prod).")
	return cmd
}

// printList prints the table; REACHABLE only when some gateway reports it.
func printList(out io.Writer, gws []gatewayv1alpha1.ClusterGateway) error {
	reach := false
	for i := range gws {
		if condition(&gws[i], conditionReachable) != nil {
			reach = true
		}
	}
	w := printers.GetNewTabWriter(out)
	header := "NAME\tENDPOINT\tADDRESS\tCREDENTIAL\tREADY"
	if reach {
		header += "\tREACHABLE"
	}
	fmt.Fprintln(w, header)
	for i := range gws {
		gw := &gws[i]
		endpoint := string(gw.Spec.Endpoint.Type)
		if endpoint == "" {
			endpoint = string(gatewayv1alpha1.EndpointDirect)
		}
		row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", gw.Name, endpoint, gw.Spec.Endpoint.Address,
			orDash(string(gw.Spec.Credential.Type)), conditionStatus(gw, gatewayv1alpha1.ConditionReady))
		if reach {
			row += "\t" + conditionStatus(gw, conditionReachable)
		}
		fmt.Fprintln(w, row)
	}
	return w.Flush()
}

func condition(gw *gatewayv1alpha1.ClusterGateway, typ string) *metav1.Condition {
	for i := range gw.Status.Conditions {
		if gw.Status.Conditions[i].Type == typ {
			return &gw.Status.Conditions[i]
		}
	}
	return nil
}

// conditionStatus is True, False or Unknown, with the reason when not True.
func conditionStatus(gw *gatewayv1alpha1.ClusterGateway, typ string) string {
	c := condition(gw, typ)
	switch {
	case c == nil:
		return "Unknown"
	case c.Status == metav1.ConditionTrue || c.Reason == "":
		return string(c.Status)
	default:
		return fmt.Sprintf("%s (%s)", c.Status, c.Reason)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
