package createbackoff

import (
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestBackoff(t *testing.T) {
	b := New(time.Second, 5*time.Second)
	key := types.NamespacedName{Namespace: "ns", Name: "rc"}
	now := time.Unix(1000, 0)
	if w := b.Wait(key, 1, now); w != 0 {
		t.Fatalf("wait before any refusal: %s", w)
	}
	var got []time.Duration
	for i := range 5 {
		d, first := b.Failed(key, 1, now, "head")
		if first != (i == 0) {
			t.Errorf("refusal %d: first %v", i, first)
		}
		got = append(got, d)
		if w := b.Wait(key, 1, now); w != d {
			t.Errorf("refusal %d: wait %s, want %s", i, w, d)
		}
		// A second refusal in the same reconcile keeps the wait.
		if d2, _ := b.Failed(key, 1, now.Add(time.Millisecond), "head"); d2 != d-time.Millisecond {
			t.Errorf("refusal %d repeated at once: %s, want %s", i, d2, d-time.Millisecond)
		}
		now = now.Add(d)
	}
	if fmt.Sprint(got) != "[1s 2s 4s 5s 5s]" {
		t.Errorf("delays %v; want doubling from 1s, capped at 5s", got)
	}
	// The streak's first refusal of another kind (the workers, once the head got in) is reported once, and does
	// not start the streak again.
	for i := range 2 {
		if d, first := b.Failed(key, 1, now, "workers"); d != 5*time.Second || first != (i == 0) {
			t.Errorf("workers refused (%d): %s first %v; want 5s, first %v", i, d, first, i == 0)
		}
		now = now.Add(5 * time.Second)
	}
	// A new generation ends the backoff; so does a create that goes through.
	if w := b.Wait(key, 2, now.Add(-time.Second)); w != 0 {
		t.Errorf("wait after a spec change: %s", w)
	}
	if d, first := b.Failed(key, 2, now, "head"); d != time.Second || !first {
		t.Errorf("after a spec change: %s first %v; want 1s, first", d, first)
	}
	b.Succeeded(key)
	if w := b.Wait(key, 2, now); w != 0 {
		t.Errorf("wait after a success: %s", w)
	}
}

func TestStableMessage(t *testing.T) {
	quota := `is forbidden: exceeded quota: pods, requested: pods=1, used: pods=1, limited: pods=1`
	gen := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "rc-small-worker-"}}
	named := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "rc-head"}}
	for _, c := range []struct {
		pod       *corev1.Pod
		err, want string
	}{
		{gen, `pods "rc-small-worker-b9km5" ` + quota, `pods ` + quota},
		{named, `pods "rc-head" ` + quota, `pods ` + quota},
		{gen, `admission webhook "x" denied the request`, `admission webhook "x" denied the request`},
		{gen, `pods "other-pod" ` + quota, `pods "other-pod" ` + quota},
	} {
		if got := StableMessage(errors.New(c.err), c.pod); got != c.want {
			t.Errorf("StableMessage(%q) = %q; want %q", c.err, got, c.want)
		}
	}
}
