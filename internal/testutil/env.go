package testutil

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// DefaultWait is how long Env's waits last unless told otherwise: the envtest suites run their subtests in
// parallel on one control plane, on small and busy machines.
const DefaultWait = 2 * time.Minute

// Env is what a controller's envtest suite shares between its subtests: a client on the control plane, fresh
// namespaces (one a subtest, so subtests do not see each other's objects), and creates and waits that fail the
// test. Embed it in the suite's own env, beside what the suite adds (its fakes, its manager's client).
type Env struct {
	// Client reads and writes the API server directly (not through a cache).
	Client client.Client
	// Wait bounds WaitFor and Eventually (DefaultWait when zero).
	Wait time.Duration
	n    atomic.Int32
}

// NewEnv is an Env on cl.
func NewEnv(cl client.Client) *Env { return &Env{Client: cl} }

func (e *Env) wait() time.Duration {
	if e.Wait > 0 {
		return e.Wait
	}
	return DefaultWait
}

// Namespace creates a fresh namespace for t and returns its name: t<N>-<the last part of the test's name>,
// lower-cased, at most 50 characters, so that an object's namespace says which subtest made it.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	name := NamespaceName(int(e.n.Add(1)), t.Name())
	e.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return name
}

// NamespaceName is the name Env.Namespace gives its n-th namespace, made for the test named test: what is not a
// lower-case letter or a digit in the test's name becomes one dash.
func NamespaceName(n int, test string) string {
	last := test[strings.LastIndex(test, "/")+1:]
	var b strings.Builder
	fmt.Fprintf(&b, "t%d-", n)
	for _, r := range strings.ToLower(last) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	name := b.String()
	if len(name) > 50 {
		name = name[:50]
	}
	return strings.TrimRight(name, "-")
}

// Create creates objs in order, failing the test at the first that the API server refuses.
func (e *Env) Create(t testing.TB, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := e.Client.Create(context.Background(), o); err != nil {
			t.Fatalf("create %T %s/%s: %v", o, o.GetNamespace(), o.GetName(), err)
		}
	}
}

// Get reads the object named as obj is (namespace and name), failing the test on an error.
func Get[T client.Object](t testing.TB, e *Env, obj T) T {
	t.Helper()
	out := newLike(obj)
	if err := e.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), out); err != nil {
		t.Fatalf("get %T %s/%s: %v", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	return out
}

// WaitFor reads the object named as obj is until cond holds of it, and returns it; the test fails after the Env's
// wait, with what was waited for and the object's last status. An object not found yet is waited for too.
func WaitFor[T client.Object](t testing.TB, e *Env, obj T, what string, cond func(T) bool) T {
	t.Helper()
	var last T
	Eventually(t, e.wait(), what, func() (bool, string) {
		// A fresh object each time: decoding into the last one would keep fields the API server no longer sends.
		last = newLike(obj)
		if err := e.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), last); err != nil {
			return false, err.Error()
		}
		return cond(last), fmt.Sprintf("status %+v", statusOf(last))
	})
	return last
}

// WaitEvent waits for an event (events.k8s.io) of type typ and reason about regarding, and returns its note.
func (e *Env) WaitEvent(t testing.TB, regarding client.Object, typ, reason string) string {
	t.Helper()
	gvk, err := apiutil.GVKForObject(regarding, e.Client.Scheme())
	if err != nil {
		t.Fatal(err)
	}
	var note string
	e.Eventually(t, typ+" event "+reason, func() (bool, string) {
		l := &eventsv1.EventList{}
		if err := e.Client.List(context.Background(), l, client.InNamespace(regarding.GetNamespace())); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range l.Items {
			if ev.Regarding.Name == regarding.GetName() && ev.Regarding.Kind == gvk.Kind && ev.Type == typ && ev.Reason == reason {
				note = ev.Note
				return true, ""
			}
			seen = append(seen, ev.Type+"/"+ev.Reason)
		}
		return false, fmt.Sprint("events: ", seen)
	})
	return note
}

// newLike is a new, empty object of obj's type.
func newLike[T client.Object](obj T) T {
	return reflect.New(reflect.TypeOf(obj).Elem()).Interface().(T)
}

// statusOf is obj's Status field, or obj itself when it has none.
func statusOf(obj client.Object) any {
	if v := reflect.ValueOf(obj).Elem(); v.Kind() == reflect.Struct {
		if st := v.FieldByName("Status"); st.IsValid() {
			return st.Interface()
		}
	}
	return obj
}

// Eventually is testutil.Eventually with the Env's wait.
func (e *Env) Eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	Eventually(t, e.wait(), what, cond)
}
