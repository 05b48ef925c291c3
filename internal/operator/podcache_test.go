package operator

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// The protobuf numbers derived from podCacheDrops are the ones the watch pruning was first written with by hand
// (read from k8s.io/api's generated.proto): the derivation reads the struct tags right.
func TestPodPruneNumbers(t *testing.T) {
	container := prune{3: nil, 4: nil, 6: nil, 7: nil, 8: nil, 9: nil, 10: nil, 11: nil, 12: nil, 15: nil, 19: nil, 22: nil}
	containerStatus := prune{7: nil, 8: nil, 10: nil, 11: nil, 12: nil, 13: nil, 14: nil}
	want := prune{
		1: {17: nil},
		2: {1: nil, 2: container, 7: nil, 14: nil, 15: nil, 18: nil, 20: container, 22: nil, 23: nil, 26: nil, 32: nil, 33: nil},
		3: {5: nil, 8: containerStatus, 10: containerStatus, 12: nil, 15: nil, 16: nil},
	}
	if diff := cmp.Diff(want, podPrune); diff != "" {
		t.Errorf("podPrune (-want +derived):\n%s", diff)
	}
}

// A name that is not a field of its own struct, or a nested set under a field that holds no struct, is refused
// by both derivations.
func TestDeriveRefusesUnknownFields(t *testing.T) {
	pod := reflect.TypeFor[corev1.Pod]()
	for name, set := range map[string]fieldSet{
		"no such field": {"Spec": {"Containers": {"Environment": nil}}},
		"not a struct":  {"Spec": {"NodeName": {"X": nil}}},
		"promoted":      {"Name": nil},
	} {
		if _, err := derivePrune(pod, set); err == nil {
			t.Errorf("%s: derivePrune accepted %v", name, set)
		}
		if err := genStrip(&bytes.Buffer{}, pod, set, "p", 0); err == nil {
			t.Errorf("%s: genStrip accepted %v", name, set)
		}
	}
	if _, err := derivePrune(reflect.TypeFor[struct{ A int }](), fieldSet{"A": nil}); err == nil || !strings.Contains(err.Error(), "protobuf") {
		t.Errorf("a field with no protobuf tag: %v", err)
	}
}
