package envtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/raycronjob"
	"github.com/manta-dev/manta/internal/testutil"
)

func TestMain(m *testing.M) {
	testutil.UseTestLogger()
	os.Exit(m.Run())
}

// env is the RayCronJob controller alone against a real kube-apiserver, its clock in the test's hands. The tests
// set the clock to a moment and then touch the RayCronJob (an annotation), which reconciles it at that moment; the
// requeue the controller asks for is real time, minutes away, and does not fire during a test.
type env struct {
	*testutil.Env
	cfg   *rest.Config
	cl    client.Client
	clock *clocktesting.FakeClock
	nudge atomic.Int32
}

func startEnv(t *testing.T) *env {
	cfg, cl := testutil.StartEnvtest(t)
	mgr := testutil.NewManager(t, cfg)
	clock := clocktesting.NewFakeClock(time.Now())
	if err := raycronjob.NewReconciler(mgr, raycronjob.Options{Clock: clock, Local: time.UTC, MaxConcurrentReconciles: 2}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	testutil.RunManager(t, mgr)
	return &env{Env: testutil.NewEnv(cl), cfg: cfg, cl: cl, clock: clock}
}

// cronJob is a valid RayCronJob on this schedule, with mutations applied; the caller names it.
func cronJob(schedule string, mutate ...func(*rayv1.RayCronJob)) *rayv1.RayCronJob {
	cj := &rayv1.RayCronJob{
		Spec: rayv1.RayCronJobSpec{Schedule: schedule, JobTemplate: rayv1.RayJobSpec{
			Entrypoint: "python -c 'print(1)'",
			RayClusterSpec: &rayv1.RayClusterSpec{HeadGroupSpec: rayv1.HeadGroupSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "ray-head", Image: "rayproject/ray:2.52.0"}}}}}},
		}},
	}
	for _, m := range mutate {
		m(cj)
	}
	return cj
}

func (e *env) create(t *testing.T, ns, name, schedule string, mutate func(*rayv1.RayCronJob)) *rayv1.RayCronJob {
	t.Helper()
	cj := cronJob(schedule)
	if mutate != nil {
		mutate(cj)
	}
	cj.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: name}
	e.Create(t, cj)
	return cj
}

// reconcileAt sets the controller's clock to now and has it reconcile the RayCronJob.
func (e *env) reconcileAt(t *testing.T, cj *rayv1.RayCronJob, now time.Time) {
	t.Helper()
	e.clock.SetTime(now)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"test.manta.dev/nudge":"%d"}}}`, e.nudge.Add(1))
	if err := e.cl.Patch(context.Background(), cj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// children lists the RayJobs carrying the RayCronJob's label, sorted by name.
func (e *env) children(t *testing.T, cj *rayv1.RayCronJob) []rayv1.RayJob {
	t.Helper()
	l := &rayv1.RayJobList{}
	if err := e.cl.List(context.Background(), l, client.InNamespace(cj.Namespace), client.MatchingLabels{raycronjob.LabelCronJobName: cj.Name}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(l.Items, func(a, b rayv1.RayJob) int { return strings.Compare(a.Name, b.Name) })
	return l.Items
}

func names(jobs []rayv1.RayJob) []string {
	out := make([]string, len(jobs))
	for i := range jobs {
		out[i] = jobs[i].Name
	}
	return out
}

// waitChildren waits until the RayCronJob's RayJobs are exactly those of the runs given.
func (e *env) waitChildren(t *testing.T, cj *rayv1.RayCronJob, runs ...time.Time) []rayv1.RayJob {
	t.Helper()
	want := make([]string, len(runs))
	for i, r := range runs {
		want[i] = raycronjob.ChildName(cj.Name, r)
	}
	slices.Sort(want)
	var got []rayv1.RayJob
	e.Eventually(t, fmt.Sprintf("RayJobs %v", want), func() (bool, string) {
		got = e.children(t, cj)
		return slices.Equal(names(got), want), fmt.Sprint("RayJobs ", names(got))
	})
	return got
}

// every returns the times of a "*/step * * * *" schedule strictly after from, up to and including to.
func every(step time.Duration, from, to time.Time) []time.Time {
	var out []time.Time
	for t := from.Truncate(step).Add(step); !t.After(to); t = t.Add(step) {
		out = append(out, t)
	}
	return out
}

func TestOnAPIServer(t *testing.T) {
	e := startEnv(t)
	t.Run("runs", e.testRuns)
	t.Run("suspend", e.testSuspend)
	t.Run("invalid time zone", e.testInvalidTimeZone)
	t.Run("admission", e.testAdmission)
}

// A RayJob per run as the clock passes each, named, labelled, annotated and owned as KubeRay's are; earlier RayJobs
// are neither waited for nor pruned; runs missed between two reconciles each get theirs.
func (e *env) testRuns(t *testing.T) {
	ns := e.Namespace(t)
	cj := e.create(t, ns, "every-five", "*/5 * * * *", nil)
	created := testutil.Get(t, e.Env, cj).CreationTimestamp.UTC()
	ticks := every(5*time.Minute, created, created.Add(time.Hour))

	// Before the first run: the status says the object was seen, and no RayJob exists.
	e.reconcileAt(t, cj, ticks[0].Add(-time.Second))
	testutil.WaitFor(t, e.Env, cj, "observedGeneration 1", func(c *rayv1.RayCronJob) bool { return c.Status.ObservedGeneration == 1 })
	if got := e.children(t, cj); len(got) != 0 {
		t.Fatalf("RayJobs %v before the first run", names(got))
	}

	e.reconcileAt(t, cj, ticks[0].Add(time.Second))
	first := e.waitChildren(t, cj, ticks[0])[0]
	owner := testutil.Get(t, e.Env, cj)
	wantOwner := []metav1.OwnerReference{{APIVersion: "ray.io/v1", Kind: "RayCronJob", Name: cj.Name, UID: owner.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	if !equalOwners(first.OwnerReferences, wantOwner) {
		t.Errorf("owner references %+v, want %+v", first.OwnerReferences, wantOwner)
	}
	if first.Labels[raycronjob.LabelCronJobName] != cj.Name {
		t.Errorf("labels %v, want %s=%s", first.Labels, raycronjob.LabelCronJobName, cj.Name)
	}
	if got, want := first.Annotations[raycronjob.AnnotationScheduledTimestamp], ticks[0].Format(time.RFC3339); got != want {
		t.Errorf("annotation %s = %q, want %q", raycronjob.AnnotationScheduledTimestamp, got, want)
	}
	if first.Spec.Entrypoint != cj.Spec.JobTemplate.Entrypoint || first.Spec.RayClusterSpec == nil {
		t.Errorf("spec %+v is not the template", first.Spec)
	}
	testutil.WaitFor(t, e.Env, cj, "lastScheduleTime "+ticks[0].String(), func(c *rayv1.RayCronJob) bool {
		return c.Status.LastScheduleTime != nil && c.Status.LastScheduleTime.Time.Equal(ticks[0])
	})
	if note := e.WaitEvent(t, cj, corev1.EventTypeNormal, raycronjob.ReasonCreatedJob); !strings.Contains(note, first.Name) {
		t.Errorf("event %q does not name %s", note, first.Name)
	}

	// The next run while the first RayJob has not finished (no RayJob controller runs here): KubeRay has no
	// concurrency policy, so it is created beside it.
	e.reconcileAt(t, cj, ticks[1].Add(time.Second))
	e.waitChildren(t, cj, ticks[0], ticks[1])

	// Two runs pass unreconciled; one touch creates both, oldest first, and keeps every earlier RayJob.
	e.reconcileAt(t, cj, ticks[3].Add(2*time.Minute))
	e.waitChildren(t, cj, ticks[0], ticks[1], ticks[2], ticks[3])
	testutil.WaitFor(t, e.Env, cj, "lastScheduleTime "+ticks[3].String(), func(c *rayv1.RayCronJob) bool {
		return c.Status.LastScheduleTime != nil && c.Status.LastScheduleTime.Time.Equal(ticks[3])
	})

	// kubectl get shows KubeRay's columns.
	tbl := e.table(t, cj)
	var cols []string
	for _, c := range tbl.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if want := []string{"Name", "schedule", "timezone", "last schedule", "age", "suspend"}; !slices.Equal(cols, want) {
		t.Errorf("columns %v, want %v", cols, want)
	}
	if len(tbl.Rows) != 1 || tbl.Rows[0].Cells[1] != "*/5 * * * *" || tbl.Rows[0].Cells[0] != cj.Name {
		t.Errorf("rows %+v", tbl.Rows)
	}
}

func equalOwners(a, b []metav1.OwnerReference) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// table gets the RayCronJob as kubectl get does, as a server-side table.
func (e *env) table(t *testing.T, cj *rayv1.RayCronJob) *metav1.Table {
	t.Helper()
	hc, err := rest.HTTPClientFor(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/apis/ray.io/v1/namespaces/%s/raycronjobs/%s", strings.TrimSuffix(e.cfg.Host, "/"), cj.Namespace, cj.Name), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("table: %s %v: %s", resp.Status, err, body)
	}
	tbl := &metav1.Table{}
	if err := json.Unmarshal(body, tbl); err != nil {
		t.Fatal(err)
	}
	return tbl
}

// Suspended, runs pass without RayJobs and with KubeRay's event; resumed, the runs missed meanwhile follow.
func (e *env) testSuspend(t *testing.T) {
	ns := e.Namespace(t)
	cj := e.create(t, ns, "paused", "*/5 * * * *", func(c *rayv1.RayCronJob) { c.Spec.Suspend = ptr.To(true) })
	created := testutil.Get(t, e.Env, cj).CreationTimestamp.UTC()
	now := created.Add(11 * time.Minute)
	e.reconcileAt(t, cj, now)
	e.WaitEvent(t, cj, corev1.EventTypeNormal, raycronjob.ReasonSuspended)
	got := testutil.WaitFor(t, e.Env, cj, "observedGeneration 1", func(c *rayv1.RayCronJob) bool { return c.Status.ObservedGeneration == 1 })
	if jobs := e.children(t, cj); len(jobs) != 0 || got.Status.LastScheduleTime != nil {
		t.Fatalf("suspended: RayJobs %v, lastScheduleTime %v", names(jobs), got.Status.LastScheduleTime)
	}

	patch := []byte(`{"spec":{"suspend":false}}`)
	if err := e.cl.Patch(context.Background(), cj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	e.waitChildren(t, cj, every(5*time.Minute, created, now)...)
}

// An unknown zone passes the schema's pattern; the controller names spec.timeZone in a condition and an event and
// creates nothing. Fixed, the schedule runs in the zone.
func (e *env) testInvalidTimeZone(t *testing.T) {
	ns := e.Namespace(t)
	cj := e.create(t, ns, "half-past", "30 * * * *", func(c *rayv1.RayCronJob) { c.Spec.TimeZone = ptr.To("Mars/Olympus") })
	created := testutil.Get(t, e.Env, cj).CreationTimestamp.UTC()
	now := created.Add(61 * time.Minute)
	e.reconcileAt(t, cj, now)
	got := testutil.WaitFor(t, e.Env, cj, "condition InvalidRayCronJobSpec", func(c *rayv1.RayCronJob) bool {
		return meta.IsStatusConditionTrue(c.Status.Conditions, string(rayv1.InvalidRayCronJobSpec))
	})
	if msg := meta.FindStatusCondition(got.Status.Conditions, string(rayv1.InvalidRayCronJobSpec)).Message; !strings.Contains(msg, "spec.timeZone") || !strings.Contains(msg, "Mars/Olympus") {
		t.Errorf("condition message %q does not name spec.timeZone and its value", msg)
	}
	if note := e.WaitEvent(t, cj, corev1.EventTypeWarning, raycronjob.ReasonInvalidSpec); !strings.Contains(note, "spec.timeZone") {
		t.Errorf("event %q does not name spec.timeZone", note)
	}
	if jobs := e.children(t, cj); len(jobs) != 0 {
		t.Fatalf("RayJobs %v from an invalid RayCronJob", names(jobs))
	}

	// Asia/Kolkata is UTC+5:30: minute 30 there is minute 0 in UTC.
	patch := []byte(`{"spec":{"timeZone":"Asia/Kolkata"}}`)
	if err := e.cl.Patch(context.Background(), cj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, e.Env, cj, "condition InvalidRayCronJobSpec gone", func(c *rayv1.RayCronJob) bool {
		return meta.FindStatusCondition(c.Status.Conditions, string(rayv1.InvalidRayCronJobSpec)) == nil
	})
	e.waitChildren(t, cj, every(time.Hour, created, now)...)
}

// What the schema can refuse is refused at admission, with a message naming the field; what KubeRay accepts passes.
func (e *env) testAdmission(t *testing.T) {
	ns := e.Namespace(t)
	for _, tc := range []struct {
		name   string
		mutate func(*rayv1.RayCronJob)
		want   string // "" when the object must be accepted
	}{
		{"name over 36 characters", func(c *rayv1.RayCronJob) { c.Name = strings.Repeat("n", 37) }, "metadata.name must be no more than 36 characters"},
		{"zone in the schedule", func(c *rayv1.RayCronJob) { c.Spec.Schedule = "TZ=UTC 0 * * * *" }, "spec.schedule: Invalid value: \"TZ=UTC 0 * * * *\": schedule must not set a time zone"},
		{"four fields", func(c *rayv1.RayCronJob) { c.Spec.Schedule = "0 * * *" }, "spec.schedule: Invalid value: \"0 * * *\": schedule must have five fields"},
		{"six fields", func(c *rayv1.RayCronJob) { c.Spec.Schedule = "0 0 * * * *" }, "spec.schedule: Invalid value: \"0 0 * * * *\": schedule must have five fields"},
		{"unknown descriptor", func(c *rayv1.RayCronJob) { c.Spec.Schedule = "@often" }, "spec.schedule: Invalid value: \"@often\": schedule must have five fields"},
		{"empty schedule", func(c *rayv1.RayCronJob) { c.Spec.Schedule = "" }, "spec.schedule: Invalid value: \"\": schedule must have five fields"},
		{"empty time zone", func(c *rayv1.RayCronJob) { c.Spec.TimeZone = ptr.To("") }, "spec.timeZone: Invalid value: \"\": spec.timeZone in body should be at least 1 chars long"},
		{"a path for a time zone", func(c *rayv1.RayCronJob) { c.Spec.TimeZone = ptr.To("../../etc/passwd") }, "spec.timeZone: Invalid value: \"../../etc/passwd\": spec.timeZone in body should match"},
		{"template without a cluster", func(c *rayv1.RayCronJob) { c.Spec.JobTemplate.RayClusterSpec = nil }, "spec.jobTemplate: Invalid value: jobTemplate.rayClusterSpec or jobTemplate.clusterSelector must be set"},
		{"template with an unknown submission mode", func(c *rayv1.RayCronJob) { c.Spec.JobTemplate.SubmissionMode = "Carrier" }, "spec.jobTemplate.submissionMode: Unsupported value: \"Carrier\""},
		{"36 characters", func(c *rayv1.RayCronJob) { c.Name = strings.Repeat("n", 36) }, ""},
		{"weekdays in a zone", func(c *rayv1.RayCronJob) {
			c.Spec.Schedule = "0 9 * * MON-FRI"
			c.Spec.TimeZone = ptr.To("America/Argentina/Buenos_Aires")
		}, ""},
		{"@every", func(c *rayv1.RayCronJob) { c.Spec.Schedule = "@every 1h30m" }, ""},
		{"@daily", func(c *rayv1.RayCronJob) { c.Spec.Schedule = "@daily" }, ""},
		{"Etc/GMT+5", func(c *rayv1.RayCronJob) { c.Spec.TimeZone = ptr.To("Etc/GMT+5") }, ""},
		{"Local", func(c *rayv1.RayCronJob) { c.Spec.TimeZone = ptr.To("Local") }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cj := cronJob("*/5 * * * *", func(c *rayv1.RayCronJob) {
				c.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "admission"}
				tc.mutate(c)
			})
			err := e.cl.Create(context.Background(), cj, client.DryRunAll)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Errorf("accepted, want refused with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("refused with %v\nwant %q", err, tc.want)
			}
		})
	}
}
