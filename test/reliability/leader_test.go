package reliability

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/testutil"
)

// The leader election timing the test gives both processes (--leader-elect-*): shorter than the defaults (15 s,
// 10 s, 2 s) to keep the test short, with the same proportions.
var testLease = leaseTiming{duration: 8 * time.Second, renewDeadline: 6 * time.Second, retryPeriod: time.Second}

// clientGoJitter is client-go's leaderelection.JitterFactor: a candidate's next try comes between 1 and
// 1 + 1.2 = 2.2 retry periods after the last one.
const clientGoJitter = 1.2

const leaseName = "manta-operator-leader"

// sigkillTakeoverBound is the longest a standby can take to acquire a SIGKILLed leader's lease, from the kill.
// A killed leader does not release its lease, and the standby cannot know it died: client-go lets a candidate
// take a held lease only once it has seen the lease record unchanged for leaseDuration, timed from when it
// *observed* the last renewal (its own clock, observedTime), and it looks only at its tries, one every
// retryPeriod × [1, 2.2). The leader's last renewal R is at or before the kill; the standby sees it at its first
// try after R, at most one jittered period later; the lease then runs out leaseDuration after that, and the
// standby notices at its next try, at most one more jittered period later. So the takeover comes at most
// leaseDuration + 2 × 2.2 × retryPeriod after the kill (the simple "leaseDuration + retryPeriod" leaves out the
// observation lag and the jitter; with the defaults that is 15 s + 8.8 s, which is why 15.3–20 s was measured
// against a 15 s lease). And never before R + leaseDuration: a live leader's lease is never taken.
func sigkillTakeoverBound(l leaseTiming) time.Duration {
	return l.duration + 2*time.Duration(float64(l.retryPeriod)*(1+clientGoJitter))
}

// TestLeaderFailover runs two `manta operator` processes with leader election, SIGKILLs the leader while it creates
// ten RayClusters and two RayJobs, scales the clusters while no one leads, and checks that the other process takes
// over within sigkillTakeoverBound and finishes the work with no duplicate pod and no second submission. Then a
// third process joins as standby and the leader is stopped gracefully (SIGTERM): it releases the lease
// (LeaderElectionReleaseOnCancel), so the standby takes over at its next try rather than when the lease runs out.
func TestLeaderFailover(t *testing.T) {
	dc, cl := devCluster(t)
	start := time.Now()
	ns := namespace(t, cl, "leader")
	fray := newFakeRay(testSeed(t))
	ledger := watchRayPods(t, t.Context(), dc.RESTConfig())
	oc := operatorConfig{kubeconfig: startClusterProxy(t, dc.RESTConfig(), fray).kubeconfig(t), leaderElection: true, lease: &testLease, namespaces: []string{ns}}
	ops := []*operatorProc{startOperator(t, "leader-a", oc), startOperator(t, "leader-b", oc)}

	var leader, standby *operatorProc
	testutil.Eventually(t, time.Minute+testLease.duration, "one operator process to be elected", func() (bool, string) {
		a, b := !ops[0].electedAt().IsZero(), !ops[1].electedAt().IsZero()
		if a && b {
			t.Fatal("both operator processes say they lead")
		}
		switch {
		case a:
			leader, standby = ops[0], ops[1]
		case b:
			leader, standby = ops[1], ops[0]
		}
		return leader != nil, "neither leads yet"
	})
	t.Logf("%s leads after %s", leader.name, time.Since(start).Round(time.Millisecond))

	const n = 10
	names := make([]string, n)
	desired := make([][]int32, n)
	for i := range names {
		names[i] = clusterName(i)
		desired[i] = []int32{2}
		if err := cl.Create(t.Context(), smallCluster(ns, names[i], 2)); err != nil {
			t.Fatal(err)
		}
	}
	jobs := []*rayv1.RayJob{smallJob(ns, "job-0", false), smallJob(ns, "job-1", true)}
	for _, j := range jobs {
		if err := cl.Create(t.Context(), j); err != nil {
			t.Fatal(err)
		}
	}
	// Kill the leader mid-work: once some, not all, of the pods exist.
	testutil.Eventually(t, time.Minute, "the leader to have created some pods", func() (bool, string) {
		c := ledger.createdIn(ns)
		return c >= 5, fmt.Sprintf("%d pods", c)
	})
	before := getLease(t, cl)
	leader.kill(t)
	killedAt := time.Now()
	t.Logf("SIGKILLed %s with %d of 30 pods created", leader.name, ledger.createdIn(ns))
	if !standby.electedAt().IsZero() {
		t.Fatalf("%s led while %s did", standby.name, leader.name)
	}
	// Work for the new leader: half the clusters scale up, half down.
	scaleAll := func() {
		for i, name := range names {
			r := int32(1 + 2*((i+len(desired[i]))%2))
			if err := scaleCluster(t.Context(), cl, ns, name, r); err != nil {
				t.Fatal(err)
			}
			desired[i] = append(desired[i], r)
		}
	}
	scaleAll()
	after := waitNewHolder(t, cl, standby, *before.Spec.HolderIdentity)
	takeover := after.Spec.AcquireTime.Sub(killedAt)
	bound := sigkillTakeoverBound(testLease)
	t.Logf("SIGKILL takeover: %s from the kill to %s acquiring the lease (%s after the last renewal read before the kill; lease %s, retry period %s, bound %s)",
		takeover.Round(time.Millisecond), standby.name, after.Spec.AcquireTime.Sub(before.Spec.RenewTime.Time).Round(time.Millisecond),
		testLease.duration, testLease.retryPeriod, bound)
	if takeover > bound {
		t.Errorf("SIGKILL takeover took %s; want within %s (see sigkillTakeoverBound)", takeover, bound)
	}
	if early := after.Spec.AcquireTime.Sub(before.Spec.RenewTime.Time); early < testLease.duration {
		t.Errorf("%s took the lease %s after the leader's last renewal, before the lease (%s) ran out", standby.name, early, testLease.duration)
	}
	waitClusters(t, cl, ledger, ns, names, desired)

	// A graceful stop: a new standby joins, the leader gets SIGTERM and releases the lease on its way out.
	leader, standby = standby, startOperator(t, "leader-c", oc)
	testutil.Eventually(t, time.Minute, "leader-c to be running and polling the lease", func() (bool, string) {
		return standby.triedLease(), "no attempt logged yet"
	})
	before = getLease(t, cl)
	// Every write to the lease from here on, in order: the release is a write, whenever the machine gets to it.
	writes := watchLease(t, dc.RESTConfig(), before.ResourceVersion)
	termAt := time.Now()
	leader.stop(t)
	stopped := time.Since(termAt)
	scaleAll()
	after = waitNewHolder(t, cl, standby, *before.Spec.HolderIdentity)
	gentle := after.Spec.AcquireTime.Sub(termAt)
	t.Logf("SIGTERM takeover: %s from the signal to %s acquiring the lease (%s exited after %s); SIGKILL took %s",
		gentle.Round(time.Millisecond), standby.name, leader.name, stopped.Round(time.Millisecond), takeover.Round(time.Millisecond))
	// Released, the lease is free at the standby's next try instead of when it runs out. Proven by the writes, not
	// by a time: between the old holder's renewals and the standby's acquisition there is the release (no holder,
	// as client-go writes it on LeaderElectionReleaseOnCancel), and nobody else held the lease in between.
	if seq := writes.until(t, after.ResourceVersion); !releasedThenTaken(seq, *before.Spec.HolderIdentity, *after.Spec.HolderIdentity) {
		t.Errorf("SIGTERM: the lease's holders in order were %q; want %s's renewals, a release (no holder), then %s: was the lease released?",
			seq, *before.Spec.HolderIdentity, *after.Spec.HolderIdentity)
	}

	waitClusters(t, cl, ledger, ns, names, desired)
	waitJobs(t, cl, ledger, jobs)
	created, deleted := checkClusterPods(t, ledger, ns, names, desired)
	refused := checkJobsOnce(t, cl, ledger, fray, jobs)
	t.Logf("%d cluster pods created, %d deleted, 2 Ray jobs accepted once each (%d repeats refused); total %s",
		created, deleted, refused, time.Since(start).Round(time.Millisecond))
}

func getLease(t *testing.T, cl client.Client) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := cl.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: leaseName}, l); err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil {
		t.Fatalf("lease %s is not held: %+v", leaseName, l.Spec)
	}
	return l
}

// waitNewHolder waits until p says it leads and the lease names a holder other than old, and returns the lease.
func waitNewHolder(t *testing.T, cl client.Client, p *operatorProc, old string) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{}
	testutil.Eventually(t, time.Minute, p.name+" to take over the lease", func() (bool, string) {
		if err := cl.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: leaseName}, l); err != nil {
			return false, err.Error()
		}
		h := ""
		if l.Spec.HolderIdentity != nil {
			h = *l.Spec.HolderIdentity
		}
		return !p.electedAt().IsZero() && h != "" && h != old && l.Spec.AcquireTime != nil, fmt.Sprintf("holder %q, %s elected: %v", h, p.name, !p.electedAt().IsZero())
	})
	return l
}

// leaseWrites collects the holder of every write to the lease a watch sees, with the write's resourceVersion.
type leaseWrites struct {
	w    watch.Interface
	seen []leaseWrite
}

type leaseWrite struct{ holder, resourceVersion string }

// watchLease watches the lease from resourceVersion on.
func watchLease(t *testing.T, cfg *rest.Config, resourceVersion string) *leaseWrites {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoordinationV1().Leases("default").Watch(t.Context(), metav1.ListOptions{
		FieldSelector: "metadata.name=" + leaseName, ResourceVersion: resourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return &leaseWrites{w: w}
}

// until returns the holders of the writes up to and including the one at resourceVersion.
func (l *leaseWrites) until(t *testing.T, resourceVersion string) []string {
	t.Helper()
	timeout := time.After(time.Minute)
	for len(l.seen) == 0 || l.seen[len(l.seen)-1].resourceVersion != resourceVersion {
		select {
		case ev, ok := <-l.w.ResultChan():
			if !ok {
				t.Fatal("the lease watch ended")
			}
			if lease, isLease := ev.Object.(*coordinationv1.Lease); isLease {
				l.seen = append(l.seen, leaseWrite{ptr.Deref(lease.Spec.HolderIdentity, ""), lease.ResourceVersion})
			}
		case <-timeout:
			t.Fatalf("the lease watch has not seen resourceVersion %s in a minute; seen %v", resourceVersion, l.seen)
		}
	}
	out := make([]string, len(l.seen))
	for i, w := range l.seen {
		out[i] = w.holder
	}
	return out
}

// releasedThenTaken says whether holders (the lease's writes in order) are old's renewals, then a release (no
// holder), then new taking it (and renewing it), and nothing else.
func releasedThenTaken(holders []string, old, new string) bool {
	i := 0
	for i < len(holders) && holders[i] == old {
		i++
	}
	if i+2 > len(holders) || holders[i] != "" {
		return false
	}
	for _, h := range holders[i+1:] {
		if h != new {
			return false
		}
	}
	return true
}

func TestReleasedThenTaken(t *testing.T) {
	for _, tc := range []struct {
		holders []string
		want    bool
	}{
		{[]string{"a", "a", "", "b"}, true},
		{[]string{"", "b", "b"}, true},
		{[]string{"a", "b"}, false},          // taken without a release: the lease ran out
		{[]string{"a", "", "c", "b"}, false}, // someone else held it in between
		{[]string{"a", ""}, false},
	} {
		if got := releasedThenTaken(tc.holders, "a", "b"); got != tc.want {
			t.Errorf("releasedThenTaken(%q) = %v, want %v", tc.holders, got, tc.want)
		}
	}
}
