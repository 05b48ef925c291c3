package features

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// kubeRayChartGates is what KubeRay v1.7.0's chart passes with its default values (templates/_helpers.tpl
// kuberay.featureGates over values.yaml featureGates).
const kubeRayChartGates = "RayClusterStatusConditions=true,RayJobDeletionPolicy=true,RayMultiHostIndexing=true,RayServiceIncrementalUpgrade=true," +
	"RayCronJob=false,RayClusterMTLS=false,RayClusterNetworkPolicy=false,RayClusterHistoryServer=false"

func TestParse(t *testing.T) {
	all := Defaults()
	for _, g := range []Gate{RayClusterStatusConditions, RayJobDeletionPolicy, RayMultiHostIndexing, RayServiceIncrementalUpgrade, RayCronJob,
		RayClusterNetworkPolicy, GCSFaultToleranceEmbeddedStorage, RayClusterMTLS, RayClusterHistoryServer} {
		if !all[g] {
			t.Errorf("%s off by default: Manta has the feature, on unless turned off", g)
		}
	}
	if all[SidecarSubmitterRestart] || all[KubernetesWAS] {
		t.Errorf("a feature Manta lacks is on by default: %v", all)
	}
	if len(all) != 11 {
		t.Errorf("%d gates, KubeRay v1.7.0 has 11", len(all))
	}

	got, err := Parse(kubeRayChartGates)
	if err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	want[RayCronJob], want[RayClusterMTLS], want[RayClusterNetworkPolicy], want[RayClusterHistoryServer] = false, false, false, false
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("KubeRay's chart gates (-want +got):\n%s", d)
	}
	// Spaces and empty pairs, as k8s.io/component-base reads them; the values strconv.ParseBool takes.
	if got, err := Parse(" RayCronJob = 0 , ,GCSFaultToleranceEmbeddedStorage=F,KubernetesWAS=false"); err != nil || got[RayCronJob] || got[GCSFaultToleranceEmbeddedStorage] {
		t.Errorf("spaced: %v %v", got, err)
	}
	// The two gates Manta once refused off are switches like the others.
	if got, err := Parse("RayClusterStatusConditions=false,RayMultiHostIndexing=false"); err != nil || got[RayClusterStatusConditions] || got[RayMultiHostIndexing] || !got[RayCronJob] {
		t.Errorf("status conditions and multi-host indexing off: %v %v", got, err)
	}

	for _, c := range []struct{ in, want string }{
		{"RayCronjob=false", `unknown feature gate "RayCronjob"`},
		{"AllAlpha=true", `unknown feature gate "AllAlpha"`},
		{"RayCronJob", `"RayCronJob" is not Name=true|false`},
		{"RayCronJob=maybe", `RayCronJob="maybe": the value must be true or false`},
		{"RayClusterStatusConditions=true,RayMultiHostIndexing=maybe", `RayMultiHostIndexing="maybe": the value must be true or false`},
		{"SidecarSubmitterRestart=true", "SidecarSubmitterRestart=true is not possible in Manta"},
		{"KubernetesWAS=true", "KubernetesWAS=true is not possible in Manta: Manta has no Kubernetes workload-aware scheduling"},
	} {
		if _, err := Parse(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.in, err, c.want)
		}
	}
}

// Every gate is described for the log at start, saying what its value does in Manta.
func TestDescribe(t *testing.T) {
	g, err := Parse(kubeRayChartGates)
	if err != nil {
		t.Fatal(err)
	}
	d := strings.Join(g.Describe(), "\n")
	for _, want := range []string{
		"RayCronJob=false: the RayCronJob controller is not started",
		"RayClusterMTLS=false: spec.tlsOptions is refused",
		"RayJobDeletionPolicy=true: on (Manta's default)",
		"RayClusterStatusConditions=true: on (Manta's default)",
		"KubernetesWAS=false: Manta has no Kubernetes workload-aware scheduling",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("description lacks %q:\n%s", want, d)
		}
	}
	off, err := Parse("RayClusterStatusConditions=false,RayMultiHostIndexing=false")
	if err != nil {
		t.Fatal(err)
	}
	d = strings.Join(off.Describe(), "\n")
	for _, want := range []string{
		"RayClusterStatusConditions=false: RayClusters get none of KubeRay's status conditions",
		"RayMultiHostIndexing=false: worker pods get no replica index",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("description lacks %q:\n%s", want, d)
		}
	}
	if n := len(g.Describe()); n != 11 {
		t.Errorf("%d lines, want one per gate", n)
	}
}

func TestSetAndEnabled(t *testing.T) {
	if !Enabled(RayCronJob) {
		t.Fatal("RayCronJob off before any Set")
	}
	t.Run("off", func(t *testing.T) {
		SetForTest(t, RayCronJob, false)
		if Enabled(RayCronJob) || !Enabled(RayClusterMTLS) {
			t.Errorf("RayCronJob %v, RayClusterMTLS %v", Enabled(RayCronJob), Enabled(RayClusterMTLS))
		}
	})
	if !Enabled(RayCronJob) {
		t.Error("SetForTest did not put the gate back")
	}
}
