package operator

import (
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// Every variable KubeRay v1.7's operator reads is honoured as KubeRay reads it, or warned about when it asks for
// what Manta does not do; numbers KubeRay would silently replace by its default are refused, naming the variable.
func TestApplyKubeRayEnv(t *testing.T) {
	var o Options
	warnings, err := ApplyKubeRayEnv(envOf(map[string]string{
		"RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS":                      "60",
		"RAYJOB_DEPLOYMENT_STATUS_TRANSITION_GRACE_PERIOD_SECONDS": "120",
		"RAYCLUSTER_DEFAULT_REQUEUE_SECONDS_ENV":                   "30",
		"DELETE_RAYJOB_CR_AFTER_JOB_FINISHES":                      "TRUE",
		"ENABLE_ZERO_DOWNTIME":                                     "false",
		"ENABLE_GCS_FT_REDIS_CLEANUP":                              "False",
		"CLUSTER_DOMAIN":                                           "corp.example",
	}), &o)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("err %v, warnings %v", err, warnings)
	}
	want := Options{RayJobStatusCheckTimeout: time.Minute, RayJobTransitionGracePeriod: 2 * time.Minute, RayClusterResyncPeriod: 30 * time.Second,
		DeleteRayJobAfterJobFinishes: true, NoZeroDowntime: true, NoRedisCleanup: true, ClusterDomain: "corp.example"}
	if o.RayJobStatusCheckTimeout != want.RayJobStatusCheckTimeout || o.RayJobTransitionGracePeriod != want.RayJobTransitionGracePeriod ||
		o.RayClusterResyncPeriod != want.RayClusterResyncPeriod || !o.DeleteRayJobAfterJobFinishes || !o.NoZeroDowntime || !o.NoRedisCleanup || o.ClusterDomain != want.ClusterDomain {
		t.Errorf("options %+v", o)
	}

	// Defaults, and values equal to KubeRay's defaults, change nothing and say nothing.
	o = Options{ClusterDomain: "cluster.local"}
	warnings, err = ApplyKubeRayEnv(envOf(map[string]string{"ENABLE_PROBES_INJECTION": "true", "ENABLE_ZERO_DOWNTIME": "true", "ENABLE_WEBHOOKS": "false"}), &o)
	if err != nil || len(warnings) != 0 || o.NoZeroDowntime || o.ClusterDomain != "cluster.local" || o.RayJobStatusCheckTimeout != 0 {
		t.Errorf("defaults: err %v, warnings %v, options %+v", err, warnings, o)
	}

	for _, name := range []string{"RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS", "RAYJOB_DEPLOYMENT_STATUS_TRANSITION_GRACE_PERIOD_SECONDS", "RAYCLUSTER_DEFAULT_REQUEUE_SECONDS_ENV"} {
		for _, v := range []string{"5m", "0", "-3"} {
			if _, err := ApplyKubeRayEnv(envOf(map[string]string{name: v}), &Options{}); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%s: err %v, want a refusal naming it", name, v, err)
			}
		}
	}

	notDone := map[string]string{
		"ENABLE_INIT_CONTAINER_INJECTION":    "false",
		"ENABLE_PROBES_INJECTION":            "FALSE",
		"ENABLE_RAY_HEAD_CLUSTER_IP_SERVICE": "true",
		"ENABLE_RANDOM_POD_DELETE":           "true",
		"ENABLE_LOGIN_SHELL":                 "true",
		"ENABLE_DETERMINISTIC_HEAD_POD_NAME": "true",
		"USE_INGRESS_ON_OPENSHIFT":           "true",
		"ENABLE_WEBHOOKS":                    "true",
	}
	warnings, err = ApplyKubeRayEnv(envOf(notDone), &Options{})
	if err != nil || len(warnings) != len(notDone) {
		t.Fatalf("err %v, %d warnings for %d variables: %v", err, len(warnings), len(notDone), warnings)
	}
	for name := range notDone {
		found := false
		for _, w := range warnings {
			found = found || strings.HasPrefix(w, "environment variable "+name+"=")
		}
		if !found {
			t.Errorf("no warning names %s: %v", name, warnings)
		}
	}
}
