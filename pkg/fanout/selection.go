package fanout

import (
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/clustergateway/cluster-gateway/pkg/multicluster"
)

// The two forms of a set's name (multicluster.LabelsSet, NamesSet).
const (
	LabelsPrefix = multicluster.SetLabelsPrefix
	NamesPrefix  = multicluster.SetNamesPrefix
)

// Selection is which ClusterGateways a set holds.
type Selection struct {
	Selector labels.Selector // nil when Names is used
	Names    []string
}

// ParseSelection reads a set's name.
func ParseSelection(s string) (Selection, error) {
	switch {
	case strings.HasPrefix(s, LabelsPrefix):
		raw := strings.ReplaceAll(strings.TrimPrefix(s, LabelsPrefix), "~", "/")
		sel, err := labels.Parse(raw)
		if err != nil {
			return Selection{}, apierrors.NewBadRequest(fmt.Sprintf("clustersets/%s: %q is not a label selector (%v); write a prefixed key's '/' as '~'", s, raw, err))
		}
		return Selection{Selector: sel}, nil
	case strings.HasPrefix(s, NamesPrefix):
		var names []string
		for n := range strings.SplitSeq(strings.TrimPrefix(s, NamesPrefix), ",") {
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
				return Selection{}, apierrors.NewBadRequest(fmt.Sprintf("clustersets/%s: %q is not a ClusterGateway name: %s", s, n, strings.Join(errs, "; ")))
			}
			names = append(names, n)
		}
		slices.Sort(names)
		return Selection{Names: slices.Compact(names)}, nil
	}
	return Selection{}, apierrors.NewBadRequest(fmt.Sprintf(
		"clustersets/%s: a set is named %q followed by a label selector on ClusterGateways (a key's '/' written as '~'), or %q followed by comma-separated ClusterGateway names", s, LabelsPrefix, NamesPrefix))
}
