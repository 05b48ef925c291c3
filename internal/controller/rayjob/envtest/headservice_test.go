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
	eventsv1 "k8s.io/api/events/v1"
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
// the API server each time: the first is a create, with no read before it, and once written (or read) pointing at
// the job's cluster it is read again only after headServiceRecheck (5 minutes on the controller's clock), and a
// Service deleted by hand is then put back.
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
	// No read: the job's first look at it was the create.
	if got := reads.Load(); got != 0 {
		t.Errorf("%d reads of the head Service before it was created, want 0", got)
	}
	e.WaitEvent(t, j, corev1.EventTypeNormal, rayjob.ReasonCreatedService)
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

// TestHeadServiceTakenBeforeTheJob: a <job>-head-svc that exists before the job's first look (an earlier job's of
// the same name, or one made by hand), pointing at another cluster, is read once its create finds the name taken
// and pointed at the job's cluster: reported updated, not created.
func TestHeadServiceTakenBeforeTheJob(t *testing.T) {
	cfg, cl := testutil.StartEnvtestWithCRDs(t, filepath.Join(testutil.MustRepoRoot(t), "config", "crd"))
	fr := newRay(t)
	var reads, creates atomic.Int64
	mgrCfg := rest.CopyConfig(cfg)
	mgrCfg.QPS, mgrCfg.Burst = 500, 1000
	mgrCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			switch {
			case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/services/taken-head-svc"):
				reads.Add(1)
			case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/services"):
				creates.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	startOperator(t, mgrCfg, fr, rayjob.Options{
		StatusCheckTimeout: time.Hour, TransitionGracePeriod: time.Hour, SubmitterFinishedTimeout: time.Hour,
		PollInterval: 100 * time.Millisecond, StopOnDeleteTimeout: 3 * time.Second, MaxConcurrentReconciles: 4,
	}, nil)
	e := &env{Env: testutil.NewEnv(cl), cl: cl, ray: fr}
	ns := e.Namespace(t)
	svcKey := client.ObjectKey{Namespace: ns, Name: "taken-head-svc"}
	old := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svcKey.Name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{rayv1.LabelCluster: "an-earlier-cluster"}, Ports: []corev1.ServicePort{{Name: "dashboard", Port: 8265}}}}
	if err := cl.Create(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	j, c, _ := e.submitted(t, testutil.MakeRayJob(ns, "taken"))
	head := e.ray.Cluster(ns, c.Name)
	id := testutil.Get(t, e.Env, j).Status.JobId
	head.SetJob(id, ray.JobStatusRunning, 1_700_000_000_000, 0)
	e.waitJobStatus(t, j, rayv1.JobStatusRunning)
	e.Eventually(t, "the head Service pointed at the job's cluster", func() (bool, string) {
		svc := &corev1.Service{}
		err := cl.Get(context.Background(), svcKey, svc)
		return err == nil && svc.Spec.Selector[rayv1.LabelCluster] == c.Name, fmt.Sprint(err, svc.Spec.Selector)
	})
	e.WaitEvent(t, j, corev1.EventTypeNormal, rayjob.ReasonUpdatedService)
	if got := reads.Load(); got != 1 {
		t.Errorf("%d reads of the head Service, want 1 (after the create found it)", got)
	}
	l := &eventsv1.EventList{}
	if err := cl.List(context.Background(), l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, ev := range l.Items {
		if ev.Regarding.Name == j.Name && ev.Reason == rayjob.ReasonCreatedService {
			t.Errorf("a %s event (%q) for a Service the job did not create", ev.Reason, ev.Note)
		}
	}
	// The job's one try (no RayCluster controller runs here): no create of its head Service again.
	if got := creates.Load(); got != 1 {
		t.Errorf("%d Service creates, want 1 (the job's one try)", got)
	}
}
