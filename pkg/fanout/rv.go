package fanout

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// rvPrefix marks a resourceVersion of a set: every cluster's own, as a JSON
// object cluster -> resourceVersion, base64url-encoded. A client treats it
// as opaque, as it must every resourceVersion.
const rvPrefix = "fo1."

func encodeRV(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	b, _ := json.Marshal(m) // a map of strings always encodes
	return rvPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// decodeRV reads a resourceVersion the client sent. "" and "0" mean the same
// for every cluster (any, or most recent) and are passed on as they are
// (all true). Anything else must be one the set gave.
func decodeRV(rv string) (m map[string]string, all bool, err error) {
	if rv == "" || rv == "0" {
		return nil, true, nil
	}
	enc, ok := strings.CutPrefix(rv, rvPrefix)
	if !ok {
		// An object's own resourceVersion is one cluster's, and says
		// nothing of where the others are.
		return nil, false, fmt.Errorf("resourceVersion %q is not one a set of clusters gave (an object's own resourceVersion is its cluster's alone, and cannot resume the set)", rv)
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil {
		return nil, false, fmt.Errorf("resourceVersion %q is not one a set of clusters gave: %v", rv, err)
	}
	return m, false, nil
}
