package raycronjob

import (
	"fmt"
	"strings"
	"time"
	// The operator's image may have no zoneinfo files; spec.timeZone must resolve anyway.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/rayjob"
	"github.com/manta-dev/manta/internal/controller/shared/reconcile"
)

// schedule is spec.schedule read in spec.timeZone.
type schedule struct {
	spec cron.Schedule
	loc  *time.Location
}

// next is the first run strictly after t, or the zero time when the schedule never matches again.
func (s schedule) next(t time.Time) time.Time {
	return s.spec.Next(t.In(s.loc))
}

// compile parses the schedule in its time zone (local when spec.timeZone is unset) and checks the rest of the spec;
// every error names its field. now only serves to refuse a schedule that can never fire.
func compile(cj *rayv1.RayCronJob, now time.Time, local *time.Location) (schedule, field.ErrorList) {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if len(cj.Name) > rayv1.MaxRayCronJobNameLength {
		errs = append(errs, field.TooLong(field.NewPath("metadata", "name"), cj.Name, rayv1.MaxRayCronJobNameLength))
	}
	loc := local
	if tz := cj.Spec.TimeZone; tz != nil {
		l, err := loadZone(*tz, local)
		if err != nil {
			errs = append(errs, field.Invalid(spec.Child("timeZone"), *tz, err.Error()))
		}
		loc = l
	}
	var parsed cron.Schedule
	switch s := cj.Spec.Schedule; {
	case strings.Contains(s, "TZ"):
		// robfig/cron would honour a TZ= prefix; KubeRay refuses it so the zone has one place, spec.timeZone.
		errs = append(errs, field.Invalid(spec.Child("schedule"), s, "must not set a time zone (TZ= or CRON_TZ=): use spec.timeZone"))
	default:
		p, err := cron.ParseStandard(s)
		if err != nil {
			errs = append(errs, field.Invalid(spec.Child("schedule"), s, err.Error()))
		}
		parsed = p
	}
	if parsed != nil && loc != nil {
		if ss, ok := parsed.(*cron.SpecSchedule); ok {
			ss.Location = loc
		}
		if (schedule{parsed, loc}).next(now).IsZero() {
			errs = append(errs, field.Invalid(spec.Child("schedule"), cj.Spec.Schedule, "matches no date in the next five years"))
		}
	}
	errs = append(errs, validateTemplate(&cj.Spec.JobTemplate)...)
	if len(errs) > 0 {
		return schedule{}, errs
	}
	return schedule{parsed, loc}, nil
}

// loadZone reads spec.timeZone as KubeRay does: time.LoadLocation, with "Local" the operator's zone (local, so tests
// can set it) and "", which LoadLocation would read as UTC, refused.
func loadZone(name string, local *time.Location) (*time.Location, error) {
	switch name {
	case "":
		return nil, fmt.Errorf("must not be empty: omit timeZone to use the operator's time zone")
	case "Local":
		return local, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone: %v", err)
	}
	return loc, nil
}

// validateTemplate holds the template to what a RayJob must be, with the errors' paths under spec.jobTemplate.
func validateTemplate(t *rayv1.RayJobSpec) field.ErrorList {
	errs := rayjob.Validate(&rayv1.RayJob{Spec: *t})
	for _, e := range errs {
		if rest, ok := strings.CutPrefix(e.Field, "spec."); ok {
			e.Field = "spec.jobTemplate." + rest
		}
	}
	return errs
}

// plan is what one reconcile does.
type plan struct {
	// errs: the spec cannot be scheduled; nothing is created until it changes.
	errs field.ErrorList
	// suspended: nothing is created and lastScheduleTime stays, so missed runs follow on resume.
	suspended bool
	// run is the scheduled time to create a RayJob for now; zero when none is due.
	run time.Time
	// requeueAfter is when the next run falls due (immediately when another is already due); zero for never.
	requeueAfter time.Duration
}

// computePlan decides from the RayCronJob alone. Like KubeRay it walks the schedule one run at a time from the
// last scheduled run (from the creation time before the first): the earliest due run is created first and each
// missed run gets its own RayJob.
func computePlan(cj *rayv1.RayCronJob, now time.Time, local *time.Location) plan {
	sched, errs := compile(cj, now, local)
	if len(errs) > 0 {
		return plan{errs: errs}
	}
	if cj.Spec.Suspend != nil && *cj.Spec.Suspend {
		return plan{suspended: true}
	}
	from := cj.CreationTimestamp.Time
	if cj.Status.LastScheduleTime != nil {
		from = cj.Status.LastScheduleTime.Time
	}
	due := sched.next(from)
	switch {
	case due.IsZero():
		return plan{}
	case due.After(now):
		return plan{requeueAfter: due.Sub(now)}
	}
	p := plan{run: due.UTC()}
	if after := sched.next(due); !after.IsZero() {
		p.requeueAfter = max(after.Sub(now), reconcile.MinRequeue)
	}
	return p
}
