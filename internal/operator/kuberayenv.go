package operator

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// KubeRay v1.7's operator reads these environment variables (ray-operator/controllers/ray, main.go). A Deployment
// moved from KubeRay keeps its env, so each one is either honoured the way KubeRay reads it, or, when it asks for
// behaviour Manta does not have, named in a warning at start; none is ignored silently. A value KubeRay would
// quietly replace with its default (a number that does not parse) is refused instead, naming the variable.
const (
	EnvRayJobStatusCheckTimeout     = "RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS"
	EnvRayJobTransitionGracePeriod  = "RAYJOB_DEPLOYMENT_STATUS_TRANSITION_GRACE_PERIOD_SECONDS"
	EnvRayClusterRequeueSeconds     = "RAYCLUSTER_DEFAULT_REQUEUE_SECONDS_ENV"
	EnvDeleteRayJobAfterJobFinishes = "DELETE_RAYJOB_CR_AFTER_JOB_FINISHES"
	EnvEnableZeroDowntime           = "ENABLE_ZERO_DOWNTIME"
	EnvClusterDomain                = "CLUSTER_DOMAIN"
	EnvEnableGCSFTRedisCleanup      = "ENABLE_GCS_FT_REDIS_CLEANUP"
	envEnableInitContainerInjection = "ENABLE_INIT_CONTAINER_INJECTION"
	envEnableProbesInjection        = "ENABLE_PROBES_INJECTION"
	envEnableHeadClusterIPService   = "ENABLE_RAY_HEAD_CLUSTER_IP_SERVICE"
	envEnableRandomPodDelete        = "ENABLE_RANDOM_POD_DELETE"
	envEnableLoginShell             = "ENABLE_LOGIN_SHELL"
	envEnableDeterministicHeadPod   = "ENABLE_DETERMINISTIC_HEAD_POD_NAME"
	envUseIngressOnOpenShift        = "USE_INGRESS_ON_OPENSHIFT"
	envEnableWebhooks               = "ENABLE_WEBHOOKS"
)

// notHonoured are the variables whose non-default value asks for what Manta does not do: the value that would
// change KubeRay's behaviour (compared case-insensitively, as KubeRay does), and what Manta does instead.
var notHonoured = []struct{ name, value, instead string }{
	{envEnableInitContainerInjection, "false", "worker pods still get the wait-gcs-ready init container"},
	{envEnableProbesInjection, "false", "probes are still added to Ray containers that set none"},
	{envEnableHeadClusterIPService, "true", "a head Service of type ClusterIP or unset is still headless"},
	{envEnableRandomPodDelete, "true", "pods are deleted as KubeRay does with it unset"},
	{envEnableLoginShell, "true", "Ray containers still run bash -c, not a login shell"},
	{envEnableDeterministicHeadPod, "true", "head pods still get generated names <cluster>-head-<suffix>"},
	{envUseIngressOnOpenShift, "true", "no Ingress or Route is made: enableIngress is reported as unsupported"},
	{envEnableWebhooks, "true", "Manta has no webhooks: the CRDs' own rules and the controllers validate"},
}

// ApplyKubeRayEnv sets the options KubeRay's environment variables stand for, reading them with getenv (os.Getenv),
// and returns a warning for each variable set to behaviour Manta does not have. An unparsable or out-of-range number
// is an error naming the variable. Flags given on the command line are applied afterwards and win.
func ApplyKubeRayEnv(getenv func(string) string, o *Options) (warnings []string, err error) {
	seconds := func(name string, set func(time.Duration)) {
		v := strings.TrimSpace(getenv(name))
		if v == "" || err != nil {
			return
		}
		n, perr := strconv.Atoi(v)
		if perr != nil || n < 1 {
			err = fmt.Errorf("environment variable %s=%q: must be a whole number of seconds, at least 1", name, v)
			return
		}
		set(time.Duration(n) * time.Second)
	}
	seconds(EnvRayJobStatusCheckTimeout, func(d time.Duration) { o.RayJobStatusCheckTimeout = d })
	seconds(EnvRayJobTransitionGracePeriod, func(d time.Duration) { o.RayJobTransitionGracePeriod = d })
	seconds(EnvRayClusterRequeueSeconds, func(d time.Duration) { o.RayClusterResyncPeriod = d })
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(getenv(EnvDeleteRayJobAfterJobFinishes), "true") {
		o.DeleteRayJobAfterJobFinishes = true
	}
	if strings.EqualFold(getenv(EnvEnableZeroDowntime), "false") {
		o.NoZeroDowntime = true
	}
	if strings.EqualFold(getenv(EnvEnableGCSFTRedisCleanup), "false") {
		o.NoRedisCleanup = true
	}
	if d := getenv(EnvClusterDomain); d != "" {
		o.ClusterDomain = d
	}
	for _, n := range notHonoured {
		if v := getenv(n.name); strings.EqualFold(strings.TrimSpace(v), n.value) {
			warnings = append(warnings, fmt.Sprintf("environment variable %s=%s is not honoured by Manta: %s", n.name, v, n.instead))
		}
	}
	return warnings, nil
}
