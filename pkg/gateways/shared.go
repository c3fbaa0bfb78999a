package gateways

import (
	"hash/maphash"
	"maps"
	"runtime"
	"slices"
	"sync"
	"unique"
	"unsafe"
	"weak"
)

// shared is what gateways of one store often hold alike: their namespace,
// and their labels and annotations (a fleet labels many clusters the same
// way: env, region, provider). Gateways with equal ones hold one shared
// value (a map of one label is about 330 bytes). It is never changed: the
// gateways' readers copy what they return (Public).
type shared struct {
	namespace   string
	labels      map[string]string
	annotations map[string]string
}

// sharedValues finds the shared value of equal contents by their hash; an
// entry goes once no gateway holds its value any more.
var sharedValues = struct {
	sync.Mutex
	byHash map[uint64][]weak.Pointer[shared]
}{byHash: map[uint64][]weak.Pointer[shared]{}}

var sharedSeed = maphash.MakeSeed()

// shareMeta returns the shared value equal to namespace, labels and
// annotations, made of these when there is none.
func shareMeta(namespace string, labels, annotations map[string]string) *shared {
	h := hashMeta(namespace, labels, annotations)
	sharedValues.Lock()
	defer sharedValues.Unlock()
	for _, w := range sharedValues.byHash[h] {
		if v := w.Value(); v != nil && v.namespace == namespace && maps.Equal(v.labels, labels) && maps.Equal(v.annotations, annotations) {
			return v
		}
	}
	v := &shared{namespace: namespace, labels: labels, annotations: annotations}
	sharedValues.byHash[h] = append(sharedValues.byHash[h], weak.Make(v))
	runtime.AddCleanup(v, dropUnshared, h)
	return v
}

// dropUnshared removes the entries of hash h whose values are gone.
func dropUnshared(h uint64) {
	sharedValues.Lock()
	defer sharedValues.Unlock()
	ws := slices.DeleteFunc(sharedValues.byHash[h], func(w weak.Pointer[shared]) bool { return w.Value() == nil })
	if len(ws) == 0 {
		delete(sharedValues.byHash, h)
	} else {
		sharedValues.byHash[h] = ws
	}
}

// hashMeta hashes the contents, whatever the maps' order.
func hashMeta(namespace string, labels, annotations map[string]string) uint64 {
	var h maphash.Hash
	h.SetSeed(sharedSeed)
	sum := func(m map[string]string) uint64 {
		var s uint64
		for k, v := range m {
			h.Reset()
			h.WriteString(k)
			h.WriteByte(0)
			h.WriteString(v)
			s += h.Sum64()
		}
		return s
	}
	l, a := sum(labels), sum(annotations)
	return maphash.String(sharedSeed, namespace) ^ l*31 ^ a*37
}

// shareBytes returns b's contents as one copy shared by everyone who asked
// for equal contents, and the handle that keeps that copy shared (hold it as
// long as the bytes). For CA bundles: clusters that one CA signed for hold
// it once. The bytes must never be written (Public copies them).
func shareBytes(b []byte) ([]byte, unique.Handle[string]) {
	if len(b) == 0 {
		return b, unique.Handle[string]{}
	}
	h := unique.Make(string(b))
	s := h.Value()
	return unsafe.Slice(unsafe.StringData(s), len(s)), h
}
