package clustergateway

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// continueToken resumes a paged list after a name. Pages come from the
// current cache, in name order: each page is consistent, and a gateway
// created or deleted between pages appears or not as it would in a new list.
type continueToken struct {
	After string `json:"after"`
}

func encodeContinue(after string) string {
	b, _ := json.Marshal(continueToken{After: after})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeContinue(s string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return "", apierrors.NewBadRequest(fmt.Sprintf("invalid continue token: %v; start the list again without it", err))
	}
	var t continueToken
	if err := json.Unmarshal(b, &t); err != nil || t.After == "" {
		return "", apierrors.NewBadRequest("invalid continue token; start the list again without it")
	}
	return t.After, nil
}

// page sorts gateways by name and cuts the page that limit and continue ask
// for; it returns the next continue token and how many items remain after it.
func page[T any](items []T, name func(T) string, limit int64, cont string) ([]T, string, *int64, error) {
	sort.Slice(items, func(i, j int) bool { return name(items[i]) < name(items[j]) })
	if cont != "" {
		after, err := decodeContinue(cont)
		if err != nil {
			return nil, "", nil, err
		}
		i := sort.Search(len(items), func(i int) bool { return name(items[i]) > after })
		items = items[i:]
	}
	if limit <= 0 || int64(len(items)) <= limit {
		return items, "", nil, nil
	}
	remaining := int64(len(items)) - limit
	items = items[:limit]
	return items, encodeContinue(name(items[len(items)-1])), &remaining, nil
}
