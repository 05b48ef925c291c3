package rayjob

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil/fakeray"
)

// The operator's check before an early start (headReady) against a head as Ray 2.52's dashboard answers (fakeray,
// whose state API answers as Ray's): not ready, and unavailable rather than failed, while its raylet has not
// registered (no head node alive); ready once it has. The submitter's script asks the same (integration/).
func TestHeadReady(t *testing.T) {
	if !strings.Contains(SubmitScript(job(nil), "http://h:8265"), "/api/v0/nodes?") {
		t.Fatal("the submitter's script does not ask for the head node")
	}
	head := fakeray.New(fakeray.Options{})
	t.Cleanup(head.Close)
	srv := httptest.NewServer(head.Dashboard())
	t.Cleanup(srv.Close)
	tr, err := ray.NewDirectTransport(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	dash := ray.NewDashboardClient(tr)
	head.SetHeadNodePending(true)
	if err := headReady(context.Background(), dash); err == nil || !errors.Is(err, ray.ErrUnavailable) {
		t.Errorf("head node not registered: %v, want an unavailable head", err)
	}
	head.SetHeadNodePending(false)
	if err := headReady(context.Background(), dash); err != nil {
		t.Errorf("head node alive: %v, want ready", err)
	}
}
