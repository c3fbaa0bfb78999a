package fanout

import (
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The two forms of a selection, the name of a clustersets object: one path
// segment, so that hub RBAC can grant it by resourceNames.
const (
	// LabelsPrefix starts a label selector on ClusterGateways. A path
	// segment cannot hold '/', so a prefixed label key is written with '~'
	// for its '/' ('~' is valid in no label key or value).
	LabelsPrefix = "labels:"
	// NamesPrefix starts a comma-separated list of ClusterGateway names.
	NamesPrefix = "names:"
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

// LabelsName is the set name of a label selector.
func LabelsName(selector string) string {
	return LabelsPrefix + strings.ReplaceAll(selector, "/", "~")
}

// NamesName is the set name of a list of ClusterGateway names.
func NamesName(names []string) string {
	return NamesPrefix + strings.Join(names, ",")
}
