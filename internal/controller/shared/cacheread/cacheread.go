// Package cacheread reads objects straight from the informer's store (listed by a field index, or by name), for
// the operator's hot read paths (a pod event's handler, the start-phase recorder, the RayCluster reconcile):
// controller-runtime's List, even with UnsafeDisableDeepCopy, makes a new list object from the scheme and copies
// every item into it by reflection, and in a burst of 1,000 RayClusters those lists were a sixth of all the
// operator allocated (docs/benchmarks.md).
package cacheread

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Index lists the cached objects of type T whose field index (registered with the manager's FieldIndexer) has a
// value. What it returns are the cache's own objects: never modify them.
type Index[T client.Object] struct {
	cache   ctrlcache.Informers // nil: always the reader
	reader  client.Reader
	obj     T
	newList func() client.ObjectList
	field   string
	// index is the indexer's name of field's index, made once: List runs at each reconcile of a hot path.
	index string

	mu       sync.Mutex
	resolved bool
	indexer  toolscache.Indexer // nil once resolved: the cache's informer is not one indexer (a multi-namespace cache)
}

// NewIndex reads field's index of T's informer in c. Where c has no single indexer for it (or c is nil), it lists
// through reader (the cache's client) instead; newList makes T's list type for that.
func NewIndex[T client.Object](c ctrlcache.Informers, reader client.Reader, obj T, newList func() client.ObjectList, field string) *Index[T] {
	return &Index[T]{cache: c, reader: reader, obj: obj, newList: newList, field: field, index: "field:" + field}
}

// List returns the objects in namespace whose index value is value.
func (x *Index[T]) List(ctx context.Context, namespace, value string) ([]T, error) {
	idx, err := x.resolve(ctx)
	if err != nil {
		return nil, err
	}
	if idx == nil {
		return x.fallback(ctx, namespace, value)
	}
	// The key controller-runtime's field indexes file an object under (internal/cache_reader.go's
	// KeyToNamespacedKey); TestIndexMatchesTheCachesList holds the two together.
	objs, err := idx.ByIndex(x.index, namespace+"/"+value)
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out, nil
}

// Indexed says whether List reads the informer's indexer (not the reader).
func (x *Index[T]) Indexed(ctx context.Context) (bool, error) {
	idx, err := x.resolve(ctx)
	return idx != nil, err
}

// resolve finds T's informer once it has synced, and whether it has the index as one indexer.
func (x *Index[T]) resolve(ctx context.Context) (toolscache.Indexer, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.resolved || x.cache == nil {
		return x.indexer, nil
	}
	inf, err := x.cache.GetInformer(ctx, x.obj)
	if err != nil {
		return nil, err
	}
	if sii, ok := inf.(toolscache.SharedIndexInformer); ok {
		if !sii.HasSynced() && !toolscache.WaitForCacheSync(ctx.Done(), sii.HasSynced) {
			return nil, fmt.Errorf("the cache of %T did not sync: %w", x.obj, ctx.Err())
		}
		if _, ok := sii.GetIndexer().GetIndexers()[x.index]; ok {
			x.indexer = sii.GetIndexer()
		}
	}
	x.resolved = true
	return x.indexer, nil
}

// fallback lists through the cache as any reader does, still without copies of the objects.
func (x *Index[T]) fallback(ctx context.Context, namespace, value string) ([]T, error) {
	list := x.newList()
	if err := x.reader.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{x.field: value}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(items))
	for _, o := range items {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out, nil
}
