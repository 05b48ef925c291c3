package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// ErrObjectChanged says a write guarded by the resourceVersion found the object changed since the cache showed it.
// Finish looks again after ConflictRequeue, with no error: the newer object's watch event usually comes first.
var ErrObjectChanged = errors.New("the object changed since it was read")

// AddFinalizer puts finalizer name on obj unless it is there. It and RemoveFinalizer write only the
// metadata, with a merge patch guarded by obj's resourceVersion: the spec is not written back, and a change made
// meanwhile is neither lost nor overwritten. A conflict is ErrObjectChanged; an object already gone is no error.
func AddFinalizer(ctx context.Context, c client.Writer, obj client.Object, name string) error {
	return patchFinalizer(ctx, clientPatcher{c}, obj, name, controllerutil.AddFinalizer)
}

// RemoveFinalizer takes finalizer name off obj when it is there; see AddFinalizer.
func RemoveFinalizer(ctx context.Context, c client.Writer, obj client.Object, name string) error {
	return patchFinalizer(ctx, clientPatcher{c}, obj, name, controllerutil.RemoveFinalizer)
}

func patchFinalizer(ctx context.Context, w MetadataPatcher, obj client.Object, name string, change func(client.Object, string) bool) error {
	if !change(obj, name) {
		return nil
	}
	// The merge patch MergeFromWithOptimisticLock would compute (a copy of the whole object and two encodings of
	// it to diff), written directly: the finalizers list whole (a merge patch replaces a list) and the
	// resourceVersion that guards it. An empty list is sent as null: the field is removed.
	var finalizers any
	if f := obj.GetFinalizers(); len(f) > 0 {
		finalizers = f
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": finalizers, "resourceVersion": obj.GetResourceVersion()}})
	if err != nil {
		return fmt.Errorf("finalizer %s: %w", name, err)
	}
	err = w.PatchMetadata(ctx, obj, patch)
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		return fmt.Errorf("finalizer %s: %w", name, ErrObjectChanged)
	}
	return fmt.Errorf("finalizer %s: %w", name, err)
}
