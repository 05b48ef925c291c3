package apiserver

import (
	"cmp"
	"maps"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/types"
)

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	return slices.Sorted(maps.Keys(m))
}

func itoa(i int) string { return strconv.Itoa(i) }

func ptrUID(o interface{ GetUID() types.UID }) *types.UID {
	u := o.GetUID()
	return &u
}
