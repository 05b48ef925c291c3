package operator

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
)

// lastApplied is kubectl apply's copy of the whole object, which no controller reads.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// stripUnread is the informer caches' transform for every type: managedFields and kubectl's last-applied copy are
// most of a small object's size and nothing in the operator reads them. Cached objects are only read, and
// written back only through patches computed against the cached copy, so what is dropped here is never lost.
func stripUnread(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
		if a := m.GetAnnotations(); a[lastApplied] != "" {
			delete(a, lastApplied)
			m.SetAnnotations(a)
		}
	}
	return obj, nil
}

// stripPod also drops the parts of a cached Ray pod the controllers never read: the fields podCacheDrops names.
func stripPod(obj any) (any, error) {
	obj, _ = stripUnread(obj)
	if p, ok := obj.(*corev1.Pod); ok {
		stripPodFields(p)
	}
	return obj, nil
}

// cacheObject is the informer caches' transform for every type but Ray pods: stripUnread, then the strings
// interned (see internStrings), but those of a spec shared with the object it replaces (cr-spec-sharing).
func cacheObject(obj any) (any, error) {
	obj, _ = stripUnread(obj)
	if takeSpecShared(obj) {
		internStringsBut(obj, "Spec") // the cached object's, interned with it (crspec.go)
	} else {
		internStrings(obj)
	}
	return obj, nil
}

// cachePod is the Ray pod cache's transform: stripPod, the conditions no controller reads dropped
// (keepReadConditions), then the strings interned. (The conditions are not among podCacheDrops: the pruned pod
// watch drops whole fields, not elements of a list by their content.)
func cachePod(obj any) (any, error) {
	obj, _ = stripPod(obj)
	if p, ok := obj.(*corev1.Pod); ok {
		keepReadConditions(p)
	}
	internStrings(obj)
	return obj, nil
}
