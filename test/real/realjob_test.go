package real

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// The phases of a RayJob's run that `make bench-realjob` records, each as seconds since the RayJob's create.
const (
	phaseHeadReady           = "headReady"           // the head pod Ready
	phaseWorkersReady        = "workersReady"        // every worker pod the spec asks for Ready
	phaseSubmitterCreated    = "submitterCreated"    // the submitter Job exists (K8sJobMode)
	phaseSubmitterPodCreated = "submitterPodCreated" // its pod exists
	phaseJobRunning          = "jobRunning"          // status.jobStatus RUNNING (an operator may not see a short job run)
	phaseRayJobStart         = "rayJobStart"         // status.rayJobInfo.startTime: Ray's own start, to the second
	phaseJobSucceeded        = "jobSucceeded"        // status.jobStatus SUCCEEDED
	phaseComplete            = "complete"            // status.jobDeploymentStatus Complete
	phaseRayJobEnd           = "rayJobEnd"           // status.rayJobInfo.endTime, to the second
)

// realJobPhases in the order a run passes them, with their column headings.
var realJobPhases = []struct{ name, heading string }{
	{phaseHeadReady, "head Ready"},
	{phaseWorkersReady, "workers Ready"},
	{phaseSubmitterCreated, "submitter Job"},
	{phaseSubmitterPodCreated, "submitter pod"},
	{phaseJobRunning, "RUNNING"},
	{phaseRayJobStart, "Ray start"},
	{phaseJobSucceeded, "SUCCEEDED"},
	{phaseComplete, "Complete"},
	{phaseRayJobEnd, "Ray end"},
}

// observation is an object as a watch delivered it, at the time it arrived.
type observation struct {
	at  time.Time
	obj client.Object
}

// realJobPhaseSeconds reads the phases of one run from what the watches of its namespace delivered (pods, Jobs,
// the RayJob): each phase is the arrival of the first object that shows it, in seconds since applied. workers is
// the number of worker pods the RayJob's spec asks for. Ray's start and end times come from the last RayJob seen
// (whole seconds: metav1.Time). A phase never seen is absent.
func realJobPhaseSeconds(applied time.Time, obs []observation, workers int) map[string]float64 {
	obs = slices.Clone(obs)
	sort.SliceStable(obs, func(i, j int) bool { return obs[i].at.Before(obs[j].at) })
	out := map[string]float64{}
	first := func(phase string, at time.Time) {
		if _, ok := out[phase]; !ok {
			out[phase] = at.Sub(applied).Seconds()
		}
	}
	readyWorkers := map[string]bool{}
	var last *rayv1.RayJob
	for _, o := range obs {
		switch x := o.obj.(type) {
		case *corev1.Pod:
			switch {
			case x.Labels[rayv1.LabelNodeType] == string(rayv1.NodeTypeHead) && podReady(x):
				first(phaseHeadReady, o.at)
			case x.Labels[rayv1.LabelNodeType] == string(rayv1.NodeTypeWorker) && podReady(x):
				readyWorkers[string(x.UID)] = true
				if len(readyWorkers) >= workers {
					first(phaseWorkersReady, o.at)
				}
			case x.Labels[batchv1.JobNameLabel] != "":
				first(phaseSubmitterPodCreated, o.at)
			}
		case *batchv1.Job:
			first(phaseSubmitterCreated, o.at)
		case *rayv1.RayJob:
			last = x
			switch x.Status.JobStatus {
			case rayv1.JobStatusRunning:
				first(phaseJobRunning, o.at)
			case rayv1.JobStatusSucceeded:
				first(phaseJobSucceeded, o.at)
			}
			if x.Status.JobDeploymentStatus == rayv1.JobDeploymentStatusComplete {
				first(phaseComplete, o.at)
			}
		}
	}
	if last != nil {
		if t := last.Status.RayJobStatusInfo.StartTime; t != nil {
			out[phaseRayJobStart] = t.Sub(applied).Seconds()
		}
		if t := last.Status.RayJobStatusInfo.EndTime; t != nil {
			out[phaseRayJobEnd] = t.Sub(applied).Seconds()
		}
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// realJobTrial is one RayJob run under one operator; the JSON `make bench-realjob` writes is a list of them.
type realJobTrial struct {
	Contender string `json:"contender"`
	Round     int    `json:"round"`
	Image     string `json:"image"` // warm or cold
	Namespace string `json:"namespace"`
	// AppliedAt is when the harness sent the RayJob's create: the zero of every phase.
	AppliedAt time.Time `json:"appliedAt"`
	// Phases holds each phase reached, in seconds since AppliedAt (realJobPhases).
	Phases map[string]float64 `json:"phaseSeconds"`
	// OperatorCPUSeconds is the operator's user + system CPU from the create to the last phase seen
	// (/proc/<pid>/stat).
	OperatorCPUSeconds float64 `json:"operatorCPUSeconds"`
	JobStatus          string  `json:"jobStatus"`
	DeploymentStatus   string  `json:"jobDeploymentStatus"`
}

// median of xs; NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// realJobTable is a Markdown table of the trials' medians per image (warm, cold) and contender: each phase, the
// operator's CPU (to a hundredth: a trial costs either operator about a tenth of a CPU-second), and apply -> SUCCEEDED over kuberay's for the same image. A median over fewer trials than the
// row has says how many had the phase ("22.0 (1/2)").
func realJobTable(trials []realJobTrial) string {
	type key struct{ image, contender string }
	var keys []key
	by := map[key][]realJobTrial{}
	for _, t := range trials {
		k := key{t.Image, t.Contender}
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], t)
	}
	imageRank := func(s string) int { return map[string]int{"warm": 0, "cold": 1}[s] }
	sort.SliceStable(keys, func(i, j int) bool {
		if a, b := imageRank(keys[i].image), imageRank(keys[j].image); a != b {
			return a < b
		}
		return keys[i].image < keys[j].image
	})
	succeeded := func(k key) float64 {
		var xs []float64
		for _, t := range by[k] {
			if v, ok := t.Phases[phaseJobSucceeded]; ok {
				xs = append(xs, v)
			}
		}
		return median(xs)
	}
	var b strings.Builder
	b.WriteString("| image | contender | trials |")
	for _, p := range realJobPhases {
		b.WriteString(" " + p.heading + " |")
	}
	b.WriteString(" operator CPU-s | SUCCEEDED vs kuberay |\n|---|---|---|")
	b.WriteString(strings.Repeat("---|", len(realJobPhases)+2) + "\n")
	for _, k := range keys {
		ts := by[k]
		fmt.Fprintf(&b, "| %s | %s | %d |", k.image, k.contender, len(ts))
		for _, p := range realJobPhases {
			var xs []float64
			for _, t := range ts {
				if v, ok := t.Phases[p.name]; ok {
					xs = append(xs, v)
				}
			}
			b.WriteString(" " + medianCell(xs, len(ts), 1) + " |")
		}
		var cpu []float64
		for _, t := range ts {
			cpu = append(cpu, t.OperatorCPUSeconds)
		}
		ratio := "–"
		if base, ok := by[key{k.image, "kuberay"}]; ok && len(base) > 0 {
			if r := succeeded(k) / succeeded(key{k.image, "kuberay"}); !math.IsNaN(r) && !math.IsInf(r, 0) {
				ratio = strconv.FormatFloat(r, 'f', 2, 64)
			}
		}
		fmt.Fprintf(&b, " %s | %s |\n", medianCell(cpu, len(ts), 2), ratio)
	}
	return b.String()
}

// medianCell is the median of xs to prec decimals, with "(len/of)" when not every trial had it, "–" for none.
func medianCell(xs []float64, of, prec int) string {
	if len(xs) == 0 {
		return "–"
	}
	s := strconv.FormatFloat(median(xs), 'f', prec, 64)
	if len(xs) < of {
		s += fmt.Sprintf(" (%d/%d)", len(xs), of)
	}
	return s
}
