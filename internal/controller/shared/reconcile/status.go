package reconcile

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StatusWriter writes the status of the object a controller reconciles. UpdateStatus writes obj's status
// subresource at obj's resourceVersion: a stale one is a Conflict (and a deleted object NotFound), which
// Result.Finish reads as a stale cache. Afterwards obj's resourceVersion is the API server's new one and its spec
// and status are as sent: a caller relies on nothing else of the answer (a writer may leave it unread, and with
// it the defaults the API server added).
type StatusWriter interface {
	UpdateStatus(ctx context.Context, obj client.Object) error
}

// ClientStatus is the StatusWriter of a controller given none: c's Status().Update, which reads the whole object
// back.
func ClientStatus(c client.Client) StatusWriter { return clientStatus{c} }

type clientStatus struct{ c client.Client }

func (s clientStatus) UpdateStatus(ctx context.Context, obj client.Object) error {
	return s.c.Status().Update(ctx, obj)
}

// MetadataPatcher is a StatusWriter that writes an object's finalizers too (metawrite.Status): PatchMetadata sends
// patch, a JSON merge patch of obj's metadata alone, and on success leaves obj's resourceVersion and finalizers as
// the API server stored them. A Lifecycle whose StatusWriter is one writes its finalizer through it; otherwise
// through its Client, whose answer to a patch is the whole object.
type MetadataPatcher interface {
	PatchMetadata(ctx context.Context, obj client.Object, patch []byte) error
}

// clientPatcher is a client's Patch as a MetadataPatcher: obj is decoded from the whole object the API server
// answers with.
type clientPatcher struct{ c client.Writer }

func (p clientPatcher) PatchMetadata(ctx context.Context, obj client.Object, patch []byte) error {
	return p.c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
}

// SpecPreserving is a StatusWriter and MetadataPatcher that writes nothing into the object it is handed but its
// resourceVersion and finalizers (metawrite.Status): where every write a controller makes of its own object goes
// through one, that object's spec may be read from the cache in place rather than copied
// (UnaliasRayJobSharingSpec).
type SpecPreserving interface {
	StatusWriter
	MetadataPatcher
	PreservesSpec()
}
