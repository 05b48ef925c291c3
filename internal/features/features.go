// Package features maps KubeRay v1.7's operator feature gates (--feature-gates) onto Manta. Manta has most of what
// KubeRay gates, always on; a gate set to false turns the feature off the way KubeRay's does (the spec fields it
// gates are refused, its controller is not started, or the
// controllers stop doing what it guards). A gate for something Manta cannot do differently is accepted
// only at the value Manta runs with, and an unknown gate is an error.
//
// The gates are process-wide, as KubeRay's are (utilfeature.DefaultFeatureGate): the operator sets them once at
// start, before its controllers run, and the validation code reads them.
package features

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// Gate is the name of one of KubeRay's feature gates.
type Gate string

// KubeRay v1.7.0's gates (ray-operator/pkg/features).
const (
	RayClusterStatusConditions       Gate = "RayClusterStatusConditions"
	RayJobDeletionPolicy             Gate = "RayJobDeletionPolicy"
	RayMultiHostIndexing             Gate = "RayMultiHostIndexing"
	RayServiceIncrementalUpgrade     Gate = "RayServiceIncrementalUpgrade"
	RayCronJob                       Gate = "RayCronJob"
	SidecarSubmitterRestart          Gate = "SidecarSubmitterRestart"
	RayClusterNetworkPolicy          Gate = "RayClusterNetworkPolicy"
	GCSFaultToleranceEmbeddedStorage Gate = "GCSFaultToleranceEmbeddedStorage"
	RayClusterMTLS                   Gate = "RayClusterMTLS"
	RayClusterHistoryServer          Gate = "RayClusterHistoryServer"
	KubernetesWAS                    Gate = "KubernetesWAS"
)

// spec is what Manta does with a gate: its value when --feature-gates does not name it, whether it can be switched,
// and, when it cannot, what Manta always does instead (said in the error and the log).
type spec struct {
	def bool
	// fixed: the gate accepts only def; always says why.
	fixed  bool
	always string
	// off says what turning the gate off does in Manta (for the log).
	off string
}

var specs = map[Gate]spec{
	RayClusterStatusConditions:       {def: true, off: "RayClusters get none of KubeRay's status conditions (HeadPodReady, RayClusterProvisioned, ReplicaFailure, RayClusterSuspending, RayClusterSuspended): the state alone says Ready or Suspended, and spec.suspend deletes the pods at once"},
	RayMultiHostIndexing:             {def: true, off: "worker pods get no replica index, replica name or host index label, and the pods of a multi-host group are created, replaced and deleted one by one, not by replica"},
	RayJobDeletionPolicy:             {def: true, off: "RayJob spec.deletionStrategy and suspended worker groups are refused"},
	RayServiceIncrementalUpgrade:     {def: true, off: "a RayService with upgradeStrategy NewClusterWithIncrementalUpgrade is not upgraded (as KubeRay: zero-downtime upgrade is off for it)"},
	RayCronJob:                       {def: true, off: "the RayCronJob controller is not started"},
	RayClusterNetworkPolicy:          {def: true, off: "spec.networkPolicy is refused"},
	GCSFaultToleranceEmbeddedStorage: {def: true, off: "gcsFaultToleranceOptions.backend rocksdb is refused"},
	RayClusterMTLS:                   {def: true, off: "spec.tlsOptions is refused"},
	RayClusterHistoryServer:          {def: true, off: "spec.historyServerOptions is refused"},
	SidecarSubmitterRestart: {def: false, fixed: true,
		always: "Manta sets no container restart policy on a SidecarMode submitter container"},
	KubernetesWAS: {def: false, fixed: true,
		always: "Manta has no Kubernetes workload-aware scheduling (scheduling.k8s.io Workload and PodGroup): use --batch-scheduler"},
}

// Gates is a value for every gate.
type Gates map[Gate]bool

// Defaults are the gates Manta runs with when --feature-gates names none: every feature it has, on.
func Defaults() Gates {
	g := Gates{}
	for n, s := range specs {
		g[n] = s.def
	}
	return g
}

// Names lists the gates, sorted.
func Names() []string {
	return slices.Sorted(func(yield func(string) bool) {
		for n := range specs {
			if !yield(string(n)) {
				return
			}
		}
	})
}

// Parse reads --feature-gates as KubeRay does (Name=bool pairs, comma-separated; spaces around them ignored) over
// Manta's defaults. An unknown gate, a bad pair or a value a fixed gate cannot take is an error naming it.
func Parse(s string) (Gates, error) {
	g := Defaults()
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		name, val, ok := strings.Cut(pair, "=")
		name = strings.TrimSpace(name)
		if !ok {
			return nil, fmt.Errorf("--feature-gates %q: %q is not Name=true|false", s, pair)
		}
		sp, known := specs[Gate(name)]
		if !known {
			return nil, fmt.Errorf("--feature-gates: unknown feature gate %q (KubeRay v1.7's gates are %s)", name, strings.Join(Names(), ", "))
		}
		on, err := strconv.ParseBool(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("--feature-gates: %s=%q: the value must be true or false", name, val)
		}
		if sp.fixed && on != sp.def {
			return nil, fmt.Errorf("--feature-gates: %s=%t is not possible in Manta: %s", name, on, sp.always)
		}
		g[Gate(name)] = on
	}
	return g, nil
}

// Describe says, for the log at start, what each gate does in Manta with its value in g, sorted by gate.
func (g Gates) Describe() []string {
	var out []string
	for _, n := range slices.Sorted(maps.Keys(g)) {
		sp := specs[n]
		switch {
		case sp.fixed:
			out = append(out, fmt.Sprintf("%s=%t: %s", n, g[n], sp.always))
		case g[n]:
			out = append(out, fmt.Sprintf("%s=true: on (Manta's default)", n))
		default:
			out = append(out, fmt.Sprintf("%s=false: %s", n, sp.off))
		}
	}
	return out
}

var current atomic.Pointer[Gates]

// Set makes g the process's gates.
func Set(g Gates) {
	c := maps.Clone(g)
	current.Store(&c)
}

// Enabled says whether gate f is on in this process (Manta's default until Set).
func Enabled(f Gate) bool {
	if g := current.Load(); g != nil {
		return (*g)[f]
	}
	return specs[f].def
}

// Current is a copy of the process's gates.
func Current() Gates {
	if g := current.Load(); g != nil {
		return maps.Clone(*g)
	}
	return Defaults()
}

// SetForTest sets gate f to on for the rest of test t, and puts the gates back after it.
func SetForTest(t testing.TB, f Gate, on bool) {
	prev := current.Load()
	g := Current()
	g[f] = on
	Set(g)
	t.Cleanup(func() { current.Store(prev) })
}
