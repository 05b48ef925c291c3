package testutil

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SpecsAsStored checks that every object of list's kind in an operator's cache has the spec the API server stores,
// each compared at the resourceVersion both hold: a controller that reads the spec from the cache in place
// (reconcile.UnaliasRayJobSharingSpec, UnaliasRayClusterSharingSpec) and changed any of it would have changed the
// cache's. spec returns an object's spec. Call it while the manager runs: a stopped cache no longer follows the
// API server.
func SpecsAsStored(t testing.TB, cache, server client.Reader, list client.ObjectList, spec func(client.Object) any) {
	t.Helper()
	ctx := context.Background()
	if err := cache.List(ctx, list); err != nil {
		t.Errorf("list the cached %T: %v", list, err)
		return
	}
	objs, err := meta.ExtractList(list)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		cached := o.(client.Object)
		key := client.ObjectKeyFromObject(cached)
		Eventually(t, time.Minute, fmt.Sprintf("%T %s cached at the API server's resourceVersion", o, key), func() (bool, string) {
			stored := cached.DeepCopyObject().(client.Object)
			if err := server.Get(ctx, key, stored); err != nil {
				return apierrors.IsNotFound(err), err.Error()
			}
			now := cached.DeepCopyObject().(client.Object)
			if err := cache.Get(ctx, key, now); err != nil {
				return apierrors.IsNotFound(err), err.Error()
			}
			if now.GetResourceVersion() != stored.GetResourceVersion() {
				return false, fmt.Sprintf("cached at %s, stored at %s", now.GetResourceVersion(), stored.GetResourceVersion())
			}
			if !equality.Semantic.DeepEqual(spec(now), spec(stored)) {
				t.Errorf("%T %s: the cached spec differs from the stored one at resourceVersion %s:\ncached %+v\nstored %+v",
					o, key, stored.GetResourceVersion(), spec(now), spec(stored))
			}
			return true, ""
		})
	}
}
