package rayservice

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/ray"
)

// ready says whether the cluster may receive traffic: the current config was applied to its current head and Ray
// reports every application RUNNING (and every configured application present).
func ready(rs *rayv1.RayService, c *clusterObs, configHash string) bool {
	if c.cluster == nil || !c.headReady || c.details == nil {
		return false
	}
	if rs.Spec.ServeConfigV2 == "" {
		return true
	}
	if c.cluster.Annotations[clusterbuild.AnnotationServeConfigHash] != configHash || c.cluster.Annotations[clusterbuild.AnnotationServeConfigHead] != headID(c.head) {
		return false
	}
	for _, name := range configuredApps(rs.Spec.ServeConfigV2) {
		if _, ok := c.details.Applications[name]; !ok {
			return false
		}
	}
	if len(c.details.Applications) == 0 {
		return false
	}
	for _, a := range c.details.Applications {
		if a.Status != ray.ApplicationStatusRunning {
			return false
		}
	}
	return true
}

// configuredApps are the application names of a serveConfigV2 ("default" when an application has none, as Serve).
func configuredApps(config string) []string {
	var cfg struct {
		Applications []struct {
			Name string `json:"name"`
		} `json:"applications"`
	}
	if err := yaml.Unmarshal([]byte(config), &cfg); err != nil {
		return nil
	}
	out := make([]string, 0, len(cfg.Applications))
	for _, a := range cfg.Applications {
		if a.Name == "" {
			a.Name = "default"
		}
		out = append(out, a.Name)
	}
	return out
}

// serviceStatus is the status of one cluster; application statuses Ray did not report this time are kept.
func serviceStatus(c *clusterObs, old rayv1.RayServiceStatus) rayv1.RayServiceStatus {
	s := old
	if c.cluster == nil {
		return s
	}
	s.RayClusterName = c.cluster.Name
	s.RayClusterStatus = *c.cluster.Status.DeepCopy()
	if c.details != nil {
		s.Applications = nil
		for name, a := range c.details.Applications {
			if s.Applications == nil {
				s.Applications = map[string]rayv1.AppStatus{}
			}
			as := rayv1.AppStatus{Status: a.Status, Message: a.Message}
			for dn, d := range a.Deployments {
				if as.Deployments == nil {
					as.Deployments = map[string]rayv1.ServeDeploymentStatus{}
				}
				as.Deployments[dn] = rayv1.ServeDeploymentStatus{Status: d.Status, Message: d.Message}
			}
			s.Applications[name] = as
		}
	}
	return s
}

// serveEndpoints counts the cluster's pods that the Serve Service selects and routes to as they are now: Running,
// Ready and labelled ray.io/serve=true.
func serveEndpoints(c *clusterObs) int {
	n := 0
	for i := range c.pods {
		if c.pods[i].Labels[rayv1.LabelServe] == "true" && clusterbuild.PodRunningAndReady(&c.pods[i]) {
			n++
		}
	}
	return n
}

// planServeLabels sets the head's ray.io/serve: true once its Serve proxy answered (unless
// excludeHeadPodFromServeSvc), false before. Workers keep the true they are created with, as under KubeRay: their
// readiness probe checks their proxy, so a worker whose proxy does not answer is not Ready and gets no traffic. It
// returns the active cluster's serve endpoints: its Ready pods labelled true.
func planServeLabels(rs *rayv1.RayService, p *plan, active, pending *clusterObs) int32 {
	var endpoints int32
	for _, c := range []*clusterObs{active, pending} {
		if c == nil || c.cluster == nil {
			continue
		}
		for i := range c.pods {
			pod := &c.pods[i]
			want := "false"
			isHead := pod.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead
			if !isHead || (c.proxyHealthy[pod.Name] && !rs.Spec.ExcludeHeadPodFromServeSvc) {
				want = "true"
			}
			if pod.Labels[rayv1.LabelServe] != want {
				p.podLabels = append(p.podLabels, podLabel{pod: pod, value: want})
			}
			if c == active && want == "true" && clusterbuild.PodRunningAndReady(pod) {
				endpoints++
			}
		}
	}
	return endpoints
}

// headID identifies a head incarnation: the pod and how often its Ray container restarted.
func headID(pod *corev1.Pod) string {
	if pod == nil {
		return ""
	}
	var restarts int32
	if len(pod.Spec.Containers) > 0 {
		name := pod.Spec.Containers[clusterbuild.RayContainerIndex].Name
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == name {
				restarts = cs.RestartCount
			}
		}
	}
	return string(pod.UID) + "/" + strconv.Itoa(int(restarts))
}
