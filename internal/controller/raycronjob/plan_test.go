package raycronjob

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/yaml"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
	"github.com/manta-dev/manta/internal/testutil"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// cronJob is a valid RayCronJob created at created, with mutations applied.
func cronJob(schedule, created string, mutate ...func(*rayv1.RayCronJob)) *rayv1.RayCronJob {
	cj := &rayv1.RayCronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "ns", UID: types.UID("uid-1"), Generation: 1,
			CreationTimestamp: metav1.NewTime(at(created))},
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

func lastRun(s string) func(*rayv1.RayCronJob) {
	return func(cj *rayv1.RayCronJob) { cj.Status.LastScheduleTime = &metav1.Time{Time: at(s)} }
}

func zone(z string) func(*rayv1.RayCronJob) {
	return func(cj *rayv1.RayCronJob) { cj.Spec.TimeZone = ptr.To(z) }
}

func TestPlanNextRun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cj      *rayv1.RayCronJob
		now     string
		run     string // "" for none
		requeue time.Duration
	}{
		{"before the first run: wait for it", cronJob("*/5 * * * *", "2024-01-01T00:00:10Z"), "2024-01-01T00:03:00Z", "", 2 * time.Minute},
		{"the first run after creation is due", cronJob("*/5 * * * *", "2024-01-01T00:00:10Z"), "2024-01-01T00:05:30Z", "2024-01-01T00:05:00Z", 4*time.Minute + 30*time.Second},
		{"a run exactly at now is due", cronJob("*/5 * * * *", "2024-01-01T00:00:10Z"), "2024-01-01T00:05:00Z", "2024-01-01T00:05:00Z", 5 * time.Minute},
		{"a creation on a tick does not run that tick", cronJob("*/5 * * * *", "2024-01-01T00:05:00Z"), "2024-01-01T00:05:00Z", "", 5 * time.Minute},
		{"the last run recorded: wait for the next", cronJob("*/5 * * * *", "2024-01-01T00:00:10Z", lastRun("2024-01-01T00:05:00Z")), "2024-01-01T00:05:30Z", "", 4*time.Minute + 30*time.Second},
		{"missed runs: the oldest first, then again at once", cronJob("*/5 * * * *", "2024-01-01T00:00:10Z", lastRun("2024-01-01T00:05:00Z")), "2024-01-01T00:21:00Z", "2024-01-01T00:10:00Z", reconcile.MinRequeue},
		{"descriptor @hourly", cronJob("@hourly", "2024-01-01T00:20:00Z"), "2024-01-01T01:00:00Z", "2024-01-01T01:00:00Z", time.Hour},
		{"@every counts from the last run", cronJob("@every 90m", "2024-01-01T00:20:00Z"), "2024-01-01T01:55:00Z", "2024-01-01T01:50:00Z", 85 * time.Minute},
		{"day of week and month names", cronJob("30 6 * JAN MON-FRI", "2024-01-05T12:00:00Z"), "2024-01-06T12:00:00Z", "", 48*time.Hour - 5*time.Hour - 30*time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := computePlan(tc.cj, at(tc.now), time.UTC)
			if len(p.errs) > 0 {
				t.Fatalf("errors: %v", p.errs)
			}
			var want time.Time
			if tc.run != "" {
				want = at(tc.run)
			}
			if !p.run.Equal(want) {
				t.Errorf("run %v, want %v", p.run, want)
			}
			if p.requeueAfter != tc.requeue {
				t.Errorf("requeueAfter %v, want %v", p.requeueAfter, tc.requeue)
			}
		})
	}
}

// Runs missed while the operator was down each get a RayJob, in order, one per reconcile (each reconcile records
// the run it created), as KubeRay v1.7 does: there is no starting deadline.
func TestPlanCatchesUpEveryMissedRun(t *testing.T) {
	cj := cronJob("0 * * * *", "2024-01-01T00:30:00Z")
	now := at("2024-01-01T04:10:00Z")
	var runs []string
	for range 10 {
		p := computePlan(cj, now, time.UTC)
		if p.run.IsZero() {
			if p.requeueAfter != 50*time.Minute {
				t.Errorf("caught up: requeueAfter %v, want 50m", p.requeueAfter)
			}
			break
		}
		runs = append(runs, p.run.Format("15:04"))
		cj.Status.LastScheduleTime = &metav1.Time{Time: p.run}
	}
	if diff := cmp.Diff([]string{"01:00", "02:00", "03:00", "04:00"}, runs); diff != "" {
		t.Errorf("runs (-want +got):\n%s", diff)
	}
}

// Suspended, nothing is due and lastScheduleTime stays; on resume the runs that fell in the suspension follow.
func TestPlanSuspend(t *testing.T) {
	cj := cronJob("*/10 * * * *", "2024-01-01T00:00:00Z", lastRun("2024-01-01T00:10:00Z"), func(cj *rayv1.RayCronJob) { cj.Spec.Suspend = ptr.To(true) })
	now := at("2024-01-01T00:35:00Z")
	if p := computePlan(cj, now, time.UTC); !p.suspended || !p.run.IsZero() || p.requeueAfter != 0 || len(p.errs) > 0 {
		t.Fatalf("suspended: plan %+v, want suspended with nothing due and no requeue", p)
	}
	cj.Spec.Suspend = ptr.To(false)
	if p := computePlan(cj, now, time.UTC); p.suspended || !p.run.Equal(at("2024-01-01T00:20:00Z")) || p.requeueAfter != reconcile.MinRequeue {
		t.Fatalf("resumed: plan %+v, want the 00:20 run and an immediate requeue for 00:30", p)
	}
}

// Concurrency and history are KubeRay's: the plan never looks at earlier RayJobs, so a run is created while earlier
// ones still run (there is no Forbid or Replace) and none is pruned. This pins that the plan's inputs are the
// RayCronJob and the clock only.
func TestPlanIgnoresEarlierRuns(t *testing.T) {
	cj := cronJob("*/5 * * * *", "2024-01-01T00:00:10Z", lastRun("2024-01-01T00:05:00Z"))
	p := computePlan(cj, at("2024-01-01T00:10:01Z"), time.UTC)
	if !p.run.Equal(at("2024-01-01T00:10:00Z")) {
		t.Fatalf("run %v, want 00:10 regardless of the 00:05 RayJob", p.run)
	}
}

func TestPlanTimeZones(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		cj    *rayv1.RayCronJob
		local *time.Location
		now   string
		run   string
	}{
		{"timeZone", cronJob("0 9 * * *", "2024-01-01T00:30:00Z", zone("Asia/Tokyo")), time.UTC, "2024-01-02T00:00:00Z", "2024-01-02T00:00:00Z"},
		{"unset: the operator's zone", cronJob("0 9 * * *", "2024-01-01T00:30:00Z"), tokyo, "2024-01-02T00:00:00Z", "2024-01-02T00:00:00Z"},
		{"Local: the operator's zone", cronJob("0 9 * * *", "2024-01-01T00:30:00Z", zone("Local")), tokyo, "2024-01-02T00:00:00Z", "2024-01-02T00:00:00Z"},
		{"UTC", cronJob("0 9 * * *", "2024-01-01T00:30:00Z", zone("UTC")), tokyo, "2024-01-01T09:00:00Z", "2024-01-01T09:00:00Z"},
		// 2024-03-10 is the first day of daylight saving time in New York: 09:00 is 13:00 UTC, the day before 14:00.
		{"before DST", cronJob("0 9 * * *", "2024-03-08T15:00:00Z", zone("America/New_York")), time.UTC, "2024-03-09T14:00:00Z", "2024-03-09T14:00:00Z"},
		{"after DST", cronJob("0 9 * * *", "2024-03-09T15:00:00Z", zone("America/New_York")), time.UTC, "2024-03-10T13:00:00Z", "2024-03-10T13:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := computePlan(tc.cj, at(tc.now), tc.local)
			if len(p.errs) > 0 {
				t.Fatalf("errors: %v", p.errs)
			}
			if !p.run.Equal(at(tc.run)) {
				t.Errorf("run %v, want %v", p.run, at(tc.run))
			}
			if p.run.Location() != time.UTC {
				t.Errorf("run in %v, want UTC (the status and the child's annotation are UTC)", p.run.Location())
			}
		})
	}
}

// Every refusal names its field; nothing is due while the spec is invalid.
func TestPlanInvalidSpec(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*rayv1.RayCronJob)
		field  string
		detail string
	}{
		{"unknown time zone", zone("Mars/Olympus"), "spec.timeZone", "unknown time zone"},
		{"empty time zone", zone(""), "spec.timeZone", "must not be empty"},
		{"zone in the schedule", func(cj *rayv1.RayCronJob) { cj.Spec.Schedule = "CRON_TZ=UTC 0 * * * *" }, "spec.schedule", "use spec.timeZone"},
		{"bad minute", func(cj *rayv1.RayCronJob) { cj.Spec.Schedule = "61 * * * *" }, "spec.schedule", "end of range (61) above maximum (59)"},
		{"six fields", func(cj *rayv1.RayCronJob) { cj.Spec.Schedule = "0 0 * * * *" }, "spec.schedule", "expected exactly 5 fields"},
		{"unknown descriptor", func(cj *rayv1.RayCronJob) { cj.Spec.Schedule = "@often" }, "spec.schedule", "unrecognized descriptor"},
		{"never fires", func(cj *rayv1.RayCronJob) { cj.Spec.Schedule = "0 0 30 2 *" }, "spec.schedule", "matches no date"},
		{"name too long", func(cj *rayv1.RayCronJob) { cj.Name = strings.Repeat("a", 37) }, "metadata.name", "may not be more than 36"},
		{"template without entrypoint", func(cj *rayv1.RayCronJob) { cj.Spec.JobTemplate.Entrypoint = "" }, "spec.jobTemplate.entrypoint", "needs an entrypoint"},
		{"template without a cluster", func(cj *rayv1.RayCronJob) { cj.Spec.JobTemplate.RayClusterSpec = nil }, "spec.jobTemplate.rayClusterSpec", "set rayClusterSpec or clusterSelector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cj := cronJob("*/5 * * * *", "2024-01-01T00:00:00Z", tc.mutate)
			p := computePlan(cj, at("2024-01-01T01:00:00Z"), time.UTC)
			if !p.run.IsZero() || p.requeueAfter != 0 {
				t.Errorf("plan %+v: want nothing due and no requeue", p)
			}
			msg := p.errs.ToAggregate()
			if msg == nil || !strings.Contains(msg.Error(), tc.field+":") || !strings.Contains(msg.Error(), tc.detail) {
				t.Errorf("errors %v, want one on %s saying %q", msg, tc.field, tc.detail)
			}
		})
	}
}

// The names are KubeRay's (<cronjob>-<minutes since the epoch>): pinned, since a change would make an upgraded
// operator create a second RayJob for a run the previous one already created.
func TestChildName(t *testing.T) {
	if got, want := ChildName("nightly", at("2024-01-01T00:05:00Z")), "nightly-28401125"; got != want {
		t.Errorf("ChildName = %q, want %q", got, want)
	}
	// The longest name a RayCronJob may have still gives a valid RayJob name (at most 47 characters) for centuries.
	if n := len(ChildName(strings.Repeat("a", rayv1.MaxRayCronJobNameLength), at("2999-12-31T23:59:00Z"))); n > 47 {
		t.Errorf("child name of a %d-character RayCronJob has %d characters, over 47", rayv1.MaxRayCronJobNameLength, n)
	}
}

func TestBuildRayJob(t *testing.T) {
	cj := cronJob("*/5 * * * *", "2024-01-01T00:00:00Z", func(cj *rayv1.RayCronJob) {
		cj.Spec.JobTemplate.Metadata = map[string]string{"team": "ml"}
	})
	run := at("2024-01-01T00:05:00Z").In(time.FixedZone("X", 3600))
	j := buildRayJob(cj, run)
	want := metav1.ObjectMeta{
		Name: "nightly-28401125", Namespace: "ns",
		Labels:      map[string]string{"ray.io/cronjob-name": "nightly"},
		Annotations: map[string]string{"ray.io/cronjob-scheduled-timestamp": "2024-01-01T00:05:00Z"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "ray.io/v1", Kind: "RayCronJob", Name: "nightly", UID: "uid-1",
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
	}
	if diff := cmp.Diff(want, j.ObjectMeta); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(cj.Spec.JobTemplate, j.Spec); diff != "" {
		t.Errorf("spec is not the template (-want +got):\n%s", diff)
	}
	j.Spec.Metadata["team"] = "changed"
	if cj.Spec.JobTemplate.Metadata["team"] != "ml" {
		t.Error("the RayJob shares the template's maps")
	}
}

// The sample (which test/compat applies to the CRD) is one the controller schedules: 02:30 in Berlin is 01:30 UTC
// in winter.
func TestSampleSchedules(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(testutil.MustRepoRoot(t), "config", "samples", "ray-cronjob.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cj := &rayv1.RayCronJob{}
	if err := yaml.UnmarshalStrict(data, cj); err != nil {
		t.Fatal(err)
	}
	cj.CreationTimestamp = metav1.NewTime(at("2024-01-01T12:00:00Z"))
	p := computePlan(cj, at("2024-01-02T01:30:00Z"), time.UTC)
	if len(p.errs) > 0 || !p.run.Equal(at("2024-01-02T01:30:00Z")) || p.requeueAfter != 24*time.Hour {
		t.Errorf("plan %+v, want the 01:30 UTC run, the next a day later", p)
	}
}
