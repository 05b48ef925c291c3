package envtest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/cacheread"
	"github.com/manta-dev/manta/internal/controller/shared/clusterpods"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestIndexMatchesTheCachesList: on a cache of all namespaces (read from its indexer), on a cache of two
// namespaces (no single indexer: listed through the cache) and with no cache (the reader), an Index lists exactly
// what controller-runtime's List with the same field selector lists, for every cluster and namespace.
func TestIndexMatchesTheCachesList(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	env := testutil.NewEnv(cl)
	ctx := t.Context()
	nsA, nsB := env.Namespace(t), env.Namespace(t)
	pod := func(ns, name, cluster string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
		if cluster != "" {
			p.Labels = map[string]string{rayv1.LabelCluster: cluster}
		}
		return p
	}
	env.Create(t, pod(nsA, "x-head", "x"), pod(nsA, "x-w1", "x"), pod(nsA, "y-head", "y"), pod(nsB, "x-head", "x"), pod(nsA, "plain", ""))

	caches := startCaches(t, cfg, cl.Scheme(), nsA, nsB, func(c ctrlcache.Cache) error { return clusterpods.Register(ctx, c) })
	newList := func() client.ObjectList { return &corev1.PodList{} }
	indexes := map[string]*cacheread.Index[*corev1.Pod]{"no cache (the reader)": cacheread.NewIndex(nil, client.Reader(caches["all namespaces"]), &corev1.Pod{}, newList, clusterpods.Index)}
	for name, c := range caches {
		indexes[name] = cacheread.NewIndex(c, client.Reader(c), &corev1.Pod{}, newList, clusterpods.Index)
	}
	for name, idx := range indexes {
		if indexed, err := idx.Indexed(ctx); err != nil || indexed != (name == "all namespaces") {
			t.Errorf("%s: read from the indexer %v (%v), want %v", name, indexed, err, name == "all namespaces")
		}
		for _, q := range []struct{ ns, cluster string }{{nsA, "x"}, {nsA, "y"}, {nsB, "x"}, {nsB, "y"}, {nsA, "none"}} {
			var want corev1.PodList
			env.Eventually(t, fmt.Sprintf("%s: the cache holds the pods", name), func() (bool, string) {
				if err := caches["all namespaces"].List(ctx, &want, client.InNamespace(q.ns), clusterpods.Of(q.cluster)); err != nil {
					return false, err.Error()
				}
				if err := caches["two namespaces"].List(ctx, &corev1.PodList{}, client.InNamespace(q.ns)); err != nil {
					return false, err.Error()
				}
				return true, ""
			})
			got, err := idx.List(ctx, q.ns, q.cluster)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var gotNames, wantNames []string
			for _, p := range got {
				gotNames = append(gotNames, p.Namespace+"/"+p.Name)
			}
			for _, p := range want.Items {
				wantNames = append(wantNames, p.Namespace+"/"+p.Name)
			}
			slices.Sort(gotNames)
			slices.Sort(wantNames)
			if !slices.Equal(gotNames, wantNames) {
				t.Errorf("%s: cluster %s in %s: got %v, want %v", name, q.cluster, q.ns, gotNames, wantNames)
			}
		}
	}
	// The fixture must tell a wrong key from a right one: some query found two pods.
	if got, _ := indexes["all namespaces"].List(context.Background(), nsA, "x"); len(got) != 2 {
		t.Fatalf("cluster x in %s: %d pods, want 2", nsA, len(got))
	}
}

// TestStoreMatchesTheCachesGet: on a cache of all namespaces (read from its store), on a cache of two namespaces
// and with no cache (the reader), a Store finds exactly the objects controller-runtime's Get finds.
func TestStoreMatchesTheCachesGet(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	env := testutil.NewEnv(cl)
	ctx := t.Context()
	nsA, nsB := env.Namespace(t), env.Namespace(t)
	svc := func(ns, name string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	}
	env.Create(t, svc(nsA, "x"), svc(nsB, "y"))
	caches := startCaches(t, cfg, cl.Scheme(), nsA, nsB, nil)
	newSvc := func() *corev1.Service { return &corev1.Service{} }
	stores := map[string]*cacheread.Store[*corev1.Service]{"no cache (the reader)": cacheread.NewStore(nil, client.Reader(caches["all namespaces"]), newSvc)}
	for name, c := range caches {
		stores[name] = cacheread.NewStore(c, client.Reader(c), newSvc)
	}
	for name, st := range stores {
		for _, q := range []struct{ ns, name string }{{nsA, "x"}, {nsB, "y"}, {nsA, "y"}, {nsB, "x"}, {nsA, "none"}} {
			var want bool
			env.Eventually(t, fmt.Sprintf("%s: the caches hold the Services", name), func() (bool, string) {
				for _, c := range caches {
					if err := c.Get(ctx, client.ObjectKey{Namespace: nsB, Name: "y"}, &corev1.Service{}); err != nil {
						return false, err.Error()
					}
				}
				err := caches["all namespaces"].Get(ctx, client.ObjectKey{Namespace: q.ns, Name: q.name}, &corev1.Service{})
				want = err == nil
				return err == nil || client.IgnoreNotFound(err) == nil, fmt.Sprint(err)
			})
			got, found, err := st.Get(ctx, q.ns, q.name)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if found != want || found && (got.Namespace != q.ns || got.Name != q.name) {
				t.Errorf("%s: %s/%s: found %v (%v), want %v", name, q.ns, q.name, found, got, want)
			}
		}
	}
}

// startCaches starts a cache of all namespaces and one of nsA and nsB, each with register (when given) applied
// before it starts, and waits for both to sync.
func startCaches(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, nsA, nsB string, register func(ctrlcache.Cache) error) map[string]ctrlcache.Cache {
	t.Helper()
	caches := map[string]ctrlcache.Cache{}
	for name, opts := range map[string]ctrlcache.Options{
		"all namespaces": {},
		"two namespaces": {DefaultNamespaces: map[string]ctrlcache.Config{nsA: {}, nsB: {}}},
	} {
		opts.Scheme = scheme
		c, err := ctrlcache.New(cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		if register != nil {
			if err := register(c); err != nil {
				t.Fatal(err)
			}
		}
		go func() { _ = c.Start(t.Context()) }()
		if !c.WaitForCacheSync(t.Context()) {
			t.Fatalf("%s: the cache did not sync", name)
		}
		caches[name] = c
	}
	return caches
}
