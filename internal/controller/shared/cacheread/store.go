package cacheread

import (
	"context"
	"fmt"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Store gets cached objects of type T by name straight from the informer's store, for reads that run at every
// event or reconcile: controller-runtime's Get, even with UnsafeDisableDeepCopy, copies the object into one the
// caller allocates and makes an error for each object not found. What it returns is the cache's own object: never
// modify it.
type Store[T client.Object] struct {
	cache  ctrlcache.Informers // nil: always the reader
	reader client.Reader
	newObj func() T

	mu       sync.Mutex
	resolved bool
	store    toolscache.Store // nil once resolved: the cache's informer is not one store (a multi-namespace cache)
}

// NewStore reads T's informer in c. Where c has no single store for it (or c is nil), it gets through reader (the
// cache's client) instead; newObj makes an empty T for that, and names T's informer.
func NewStore[T client.Object](c ctrlcache.Informers, reader client.Reader, newObj func() T) *Store[T] {
	return &Store[T]{cache: c, reader: reader, newObj: newObj}
}

// Get returns the object namespace/name, and whether the cache has it.
func (s *Store[T]) Get(ctx context.Context, namespace, name string) (obj T, found bool, err error) {
	st, err := s.resolve(ctx)
	if err != nil {
		return obj, false, err
	}
	if st == nil {
		o := s.newObj()
		err := s.reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, o, client.UnsafeDisableDeepCopy)
		if err != nil {
			return obj, false, client.IgnoreNotFound(err)
		}
		return o, true, nil
	}
	// The key controller-runtime's cache reader looks a namespaced object up by (objectKeyToStoreKey).
	item, ok, err := st.GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return obj, false, err
	}
	obj, ok = item.(T)
	return obj, ok, nil
}

// resolve finds T's informer once it has synced.
func (s *Store[T]) resolve(ctx context.Context) (toolscache.Store, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resolved || s.cache == nil {
		return s.store, nil
	}
	o := s.newObj()
	inf, err := s.cache.GetInformer(ctx, o)
	if err != nil {
		return nil, err
	}
	if sii, ok := inf.(toolscache.SharedIndexInformer); ok {
		if !sii.HasSynced() && !toolscache.WaitForCacheSync(ctx.Done(), sii.HasSynced) {
			return nil, fmt.Errorf("the cache of %T did not sync: %w", o, ctx.Err())
		}
		s.store = sii.GetStore()
	}
	s.resolved = true
	return s.store, nil
}
