package reconcile

import (
	"context"

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
