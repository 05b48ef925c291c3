// Package clusterpods finds a RayCluster's pods in the operator's cache through an index on their ray.io/cluster
// label. Selecting them by label instead walks every cached pod of the namespace on each reconcile, which grows
// with the number of clusters in the namespace (docs/benchmarks.md, "Why each mechanism exists").
//
// The pods found are the cache's, and the operator's cache strips what no controller reads of a Ray pod (the
// table podCacheDrops in internal/operator/podcache.go): the containers' command, args, env, ports, resources,
// probes and mounts, the volumes, the scheduling constraints, security contexts and the runtime's IDs are empty
// there, and of the conditions only Ready and PodScheduled are kept (podConditionsRead). Read those from the
// RayCluster's pod template; a controller that must read one from the pod has to take it out of that table (or
// add the condition) first.
package clusterpods

import (
	"context"
	"reflect"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// Index is the name of the field index on cached pods, named after the label whose value it holds.
const Index = rayv1.LabelCluster

// IndexValue is the index function: a pod's cluster name, or none.
func IndexValue(o client.Object) []string {
	if v := o.GetLabels()[rayv1.LabelCluster]; v != "" {
		return []string{v}
	}
	return nil
}

// registered holds the field indexers (managers' caches) that have the index: every controller that lists a
// cluster's pods registers it in its SetupWithManager, and an informer refuses an index it already has.
var registered sync.Map

// Register adds the index to the cache behind idx (mgr.GetFieldIndexer()), once per cache.
func Register(ctx context.Context, idx client.FieldIndexer) error {
	comparable := reflect.TypeOf(idx).Comparable()
	if comparable {
		if _, loaded := registered.LoadOrStore(idx, struct{}{}); loaded {
			return nil
		}
	}
	err := idx.IndexField(ctx, &corev1.Pod{}, Index, IndexValue)
	if err != nil && comparable {
		registered.Delete(idx)
	}
	return err
}

// Of selects the pods of the cluster named name; use it with client.InNamespace on a client that reads from a
// cache the index was registered on. The pods come stripped (see the package doc): no env, ports, resources or
// probes.
func Of(name string) client.MatchingFields { return client.MatchingFields{Index: name} }
