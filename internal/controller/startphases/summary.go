package startphases

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Summary is the one line `kubectl describe` shows once a start is over: the time from creation to the phase end
// (Ray ready for a RayCluster, finished for a RayJob), then each step reached on the way, the slowest first and
// marked, the others in order. verb says what end means ("started", "finished").
func Summary(verb string, t *Times, end Phase) string {
	type step struct {
		p Phase
		d time.Duration
	}
	var steps []step
	slowest := -1
	for p := Phase(0); p <= end; p++ {
		if !t.Has(p) {
			continue
		}
		steps = append(steps, step{p, t.StepOf(p)})
		if slowest < 0 || steps[len(steps)-1].d > steps[slowest].d {
			slowest = len(steps) - 1
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s in %s", verb, Round(t.Since(end)))
	if slowest < 0 {
		return b.String()
	}
	fmt.Fprintf(&b, ": %s %s (slowest)", steps[slowest].p.Step(), Round(steps[slowest].d))
	for i, s := range steps {
		if i != slowest {
			fmt.Fprintf(&b, ", %s %s", s.p.Step(), Round(s.d))
		}
	}
	return b.String()
}

// Round rounds a duration for people: whole seconds from 10 s on, tenths below (the API server's times are
// whole seconds, Ray's milliseconds).
func Round(d time.Duration) time.Duration {
	if d >= 10*time.Second {
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}

// LateReason is the event reason of a step that took longer than the threshold: one reason per phase, so the
// event queue, which counts an event of the same reason about the same object as a repeat, keeps them apart.
func LateReason(p Phase) string {
	return [...]string{"SlowScheduling", "SlowImagePull", "SlowContainerStart", "SlowRayStart", "SlowJobSubmission", "SlowJobStart", "SlowJobRun"}[p]
}

// ReasonSummary is the reason of the summary event.
const ReasonSummary = "StartPhases"

// Late says whether the step that ends at phase p took longer than threshold (never, for a threshold of 0).
func Late(t *Times, p Phase, threshold time.Duration) bool {
	return threshold > 0 && t.Has(p) && t.StepOf(p) > threshold
}

// lateNote is the late event's message.
func lateNote(kind string, t *Times, p Phase, threshold time.Duration, pod string) string {
	note := fmt.Sprintf("%s reached %s %s after creation: the %s took %s, over the %s threshold (--start-phase-late-threshold)",
		kind, p, Round(t.Since(p)), p.Step(), Round(t.StepOf(p)), threshold)
	if pod != "" {
		note += "; last pod: " + pod
	}
	return note
}

// StepTime is one step of a parsed summary.
type StepTime struct {
	Phase    Phase
	Duration time.Duration
}

// ParseSummary reads a summary event's note back (for tools that plot what the operator reported): the total and
// the steps, in phase order. It refuses a note Summary did not write.
func ParseSummary(note string) (total time.Duration, steps []StepTime, err error) {
	_, rest, ok := strings.Cut(note, " in ")
	if !ok {
		return 0, nil, fmt.Errorf("summary %q: no total", note)
	}
	totalText, list, _ := strings.Cut(rest, ": ")
	if total, err = time.ParseDuration(totalText); err != nil {
		return 0, nil, fmt.Errorf("summary %q: total: %w", note, err)
	}
	byStep := map[string]Phase{}
	for _, p := range Phases {
		byStep[p.Step()] = p
	}
	seen := map[Phase]bool{}
	for _, item := range strings.Split(list, ", ") {
		if item == "" {
			continue
		}
		item = strings.TrimSuffix(item, " (slowest)")
		i := strings.LastIndexByte(item, ' ')
		p, known := byStep[item[:max(i, 0)]]
		if i < 0 || !known || seen[p] {
			return 0, nil, fmt.Errorf("summary %q: step %q", note, item)
		}
		d, err := time.ParseDuration(item[i+1:])
		if err != nil {
			return 0, nil, fmt.Errorf("summary %q: step %q: %w", note, item, err)
		}
		seen[p] = true
		steps = append(steps, StepTime{p, d})
	}
	slices.SortFunc(steps, func(a, b StepTime) int { return int(a.Phase) - int(b.Phase) })
	return total, steps, nil
}
