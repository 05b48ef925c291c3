package envtest

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
	"github.com/manta-dev/manta/internal/testutil/fakeray"
)

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestHeadServiceReadOncePerRecheck: a running job's polls do not read its <job>-head-svc (not in the cache) from
// the API server each time: once read (or written) pointing at the job's cluster, it is read again only after
// headServiceRecheck (5 minutes on the controller's clock), and a Service deleted by hand is then put back.
func TestHeadServiceReadOncePerRecheck(t *testing.T) {
	cfg, cl := testutil.StartEnvtestWithCRDs(t, filepath.Join(testutil.MustRepoRoot(t), "config", "crd"))
	fr := newRay(t)
	var reads atomic.Int64
	mgrCfg := rest.CopyConfig(cfg)
	mgrCfg.QPS, mgrCfg.Burst = 500, 1000
	mgrCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "-head-svc") && strings.Contains(r.URL.Path, "/services/") {
				reads.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	clk := clocktesting.NewFakeClock(time.Now())
	startOperator(t, mgrCfg, fr, rayjob.Options{
		StatusCheckTimeout: time.Hour, TransitionGracePeriod: time.Hour, SubmitterFinishedTimeout: time.Hour,
		PollInterval: 100 * time.Millisecond, StopOnDeleteTimeout: 3 * time.Second, MaxConcurrentReconciles: 4, Clock: clk,
	}, nil)
	e := &env{Env: testutil.NewEnv(cl), cl: cl, ray: fr}
	ns := e.Namespace(t)
	j, c, _ := e.submitted(t, testutil.MakeRayJob(ns, "svc"))
	head := e.ray.Cluster(ns, c.Name)
	id := testutil.Get(t, e.Env, j).Status.JobId
	head.SetJob(id, ray.JobStatusRunning, 1_700_000_000_000, 0)
	e.waitJobStatus(t, j, rayv1.JobStatusRunning)
	svcKey := client.ObjectKey{Namespace: ns, Name: j.Name + "-head-svc"}
	e.Eventually(t, "the head Service", func() (bool, string) {
		err := cl.Get(context.Background(), svcKey, &corev1.Service{})
		return err == nil, fmt.Sprint(err)
	})
	// Barrier: the polls that follow read the job from Ray; ten of them after the Service was read.
	polls := func() int { return head.Calls(fakeray.Route(http.MethodGet, "/api/jobs/"+id)) }
	// The one read: the poll that found it absent, and created it.
	if got := reads.Load(); got != 1 {
		t.Errorf("%d reads of the head Service before it existed, want 1", got)
	}
	before, from := reads.Load(), polls()
	e.Eventually(t, "ten more polls", func() (bool, string) { return polls() >= from+10, fmt.Sprintf("%d polls", polls()-from) })
	if got := reads.Load() - before; got != 0 {
		t.Errorf("%d reads of the head Service over ten polls, want 0 (it was read pointing at the cluster)", got)
	}

	// Deleted by hand: put back once the recheck is due.
	if err := cl.Delete(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: svcKey.Namespace, Name: svcKey.Name}}); err != nil {
		t.Fatal(err)
	}
	e.Eventually(t, "the head Service gone", func() (bool, string) {
		err := cl.Get(context.Background(), svcKey, &corev1.Service{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	clk.Step(5*time.Minute + time.Second)
	e.Eventually(t, "the head Service put back after the recheck", func() (bool, string) {
		svc := &corev1.Service{}
		err := cl.Get(context.Background(), svcKey, svc)
		return err == nil && svc.Spec.Selector[rayv1.LabelCluster] == c.Name, fmt.Sprint(err)
	})
}
