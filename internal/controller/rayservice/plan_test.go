package rayservice

//lint:file-ignore SA1019 the deprecated KubeRay thresholds are accepted and reported as unsupported, so they are read here

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/validation"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func planService() *rayv1.RayService {
	rs := makeService("ns", "svc")
	rs.UID = "rs-uid"
	rs.Generation = 1
	return rs
}

func names(seq ...string) func() string {
	return func() string {
		n := seq[0]
		seq = seq[1:]
		return n
	}
}

// readyCluster is a cluster of rs whose head is ready, with the current config applied and all apps RUNNING.
func readyCluster(rs *rayv1.RayService, name string) *clusterObs {
	c := clusterbuild.RayServiceCluster(rs, name)
	head := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-head-x", UID: "head-uid", Labels: map[string]string{rayv1.LabelNodeType: rayv1.NodeTypeHead, rayv1.LabelServe: "true"}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-head"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	c.Annotations[clusterbuild.AnnotationServeConfigHash] = clusterbuild.ServeConfigHash(rs.Spec.ServeConfigV2)
	c.Annotations[clusterbuild.AnnotationServeConfigHead] = headID(&head)
	apps := map[string]ray.ServeApplication{}
	for _, a := range configuredApps(rs.Spec.ServeConfigV2) {
		apps[a] = ray.ServeApplication{Status: ray.ApplicationStatusRunning}
	}
	co := &clusterObs{cluster: c, pods: []corev1.Pod{head}, headReady: true, details: &ray.ServeDetails{Applications: apps},
		proxyHealthy: map[string]bool{head.Name: true}}
	co.head = &co.pods[0]
	return co
}

// A stale cache must never create two clusters: the name is recorded in the status first, the cluster is created
// only by a reconcile that reads the name back, under that name.
func TestPlanRecordsNameBeforeCreating(t *testing.T) {
	rs := planService()
	p := computePlan(observed{rs: rs, now: t0, newName: names("svc-aaaaa")})
	if p.createCluster != nil {
		t.Fatalf("created %s before its name was recorded", p.createCluster.Name)
	}
	if got := p.status.PendingServiceStatus.RayClusterName; got != "svc-aaaaa" {
		t.Fatalf("pending name %q", got)
	}
	rs.Status = p.status
	for range 2 { // a retried reconcile, the cluster not in the cache yet: the same name again
		p = computePlan(observed{rs: rs, now: t0, pending: &clusterObs{}, newName: names("svc-bbbbb")})
		if p.createCluster == nil || p.createCluster.Name != "svc-aaaaa" {
			t.Fatalf("create %+v, want svc-aaaaa", p.createCluster)
		}
		if p.status.PendingServiceStatus.RayClusterName != "svc-aaaaa" {
			t.Fatalf("pending name changed to %q", p.status.PendingServiceStatus.RayClusterName)
		}
	}
}

// An upgrade switches the Services only to a cluster with a serve endpoint already: a new head whose proxy just
// answered is labelled in the same reconcile, after the Service is written, and a worker whose proxy is not up yet
// is not Ready; switched then, the Service would route to nothing.
func TestPlanUpgradeWaitsForAServeEndpoint(t *testing.T) {
	rs := planService()
	old := readyCluster(rs, "svc-old")
	rs.Status.ActiveServiceStatus.RayClusterName = "svc-old"
	rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:new"
	rs.Status.PendingServiceStatus.RayClusterName = "svc-new"
	pending := readyCluster(rs, "svc-new")
	pending.pods[0].Labels[rayv1.LabelServe] = "false"
	worker := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "svc-new-worker-x", Labels: map[string]string{rayv1.LabelNodeType: rayv1.NodeTypeWorker, rayv1.LabelServe: "true"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.2", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}}
	pending.pods = append(pending.pods, worker)
	pending.head = &pending.pods[0]
	obs := func() observed {
		return observed{rs: rs, now: t0, active: old, pending: pending, clusters: []rayv1.RayCluster{*old.cluster, *pending.cluster}}
	}

	p := computePlan(obs())
	if p.status.ActiveServiceStatus.RayClusterName != "svc-old" {
		t.Fatalf("switched to a cluster with no serve endpoint")
	}
	for _, svc := range p.services {
		if svc.Spec.Selector[rayv1.LabelCluster] != "svc-old" {
			t.Errorf("Service %s selects %v", svc.Name, svc.Spec.Selector)
		}
	}
	if len(p.podLabels) != 1 || p.podLabels[0].pod.Name != pending.head.Name || p.podLabels[0].value != "true" {
		t.Fatalf("labels %+v: want the new head labelled serve=true", p.podLabels)
	}

	// The label is stored: the head is an endpoint, traffic moves.
	pending.pods[0].Labels[rayv1.LabelServe] = "true"
	if p = computePlan(obs()); p.status.ActiveServiceStatus.RayClusterName != "svc-new" {
		t.Fatalf("not switched with the head labelled: active %q", p.status.ActiveServiceStatus.RayClusterName)
	}

	// A Ready worker is enough too (excludeHeadPodFromServeSvc keeps the head out).
	pending.pods[0].Labels[rayv1.LabelServe] = "false"
	pending.pods[1].Status.Conditions[0].Status = corev1.ConditionTrue
	if p = computePlan(obs()); p.status.ActiveServiceStatus.RayClusterName != "svc-new" {
		t.Fatalf("not switched with a Ready worker: active %q", p.status.ActiveServiceStatus.RayClusterName)
	}

	// The first cluster has no traffic to keep: it is promoted as soon as its applications run.
	first := planService()
	first.Status.PendingServiceStatus.RayClusterName = "svc-first"
	c := readyCluster(first, "svc-first")
	c.pods[0].Labels[rayv1.LabelServe] = "false"
	p = computePlan(observed{rs: first, now: t0, pending: c, clusters: []rayv1.RayCluster{*c.cluster}})
	if p.status.ActiveServiceStatus.RayClusterName != "svc-first" {
		t.Fatalf("first cluster not promoted: active %q", p.status.ActiveServiceStatus.RayClusterName)
	}
}

func TestPlanPromotionAndDeletionDelay(t *testing.T) {
	rs := planService()
	rs.Spec.RayClusterDeletionDelaySeconds = ptr.To[int32](60)
	old := readyCluster(rs, "svc-old")
	rs.Status.ActiveServiceStatus.RayClusterName = "svc-old"
	// The spec changes: a new cluster is needed.
	rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:new"
	rs.Status.PendingServiceStatus.RayClusterName = "svc-new"
	pending := readyCluster(rs, "svc-new")
	// Not RUNNING yet: no switch.
	pending.details.Applications["fruit_app"] = ray.ServeApplication{Status: ray.ApplicationStatusUnhealthy}
	p := computePlan(observed{rs: rs, now: t0, active: old, pending: pending, clusters: []rayv1.RayCluster{*old.cluster, *pending.cluster}})
	if p.status.ActiveServiceStatus.RayClusterName != "svc-old" || p.services[0].Spec.Selector[rayv1.LabelCluster] != "svc-old" {
		t.Fatalf("switched to a cluster with an UNHEALTHY application")
	}
	if c := meta.FindStatusCondition(p.status.Conditions, string(rayv1.UpgradeInProgress)); c.Status != metav1.ConditionTrue || c.Reason != string(rayv1.BothActivePendingClustersExist) {
		t.Errorf("UpgradeInProgress %+v", c)
	}
	// RUNNING: switch, and start the old cluster's deletion delay.
	pending.details.Applications["fruit_app"] = ray.ServeApplication{Status: ray.ApplicationStatusRunning}
	p = computePlan(observed{rs: rs, now: t0, active: old, pending: pending, clusters: []rayv1.RayCluster{*old.cluster, *pending.cluster}})
	if p.status.ActiveServiceStatus.RayClusterName != "svc-new" || p.status.PendingServiceStatus.RayClusterName != "" {
		t.Fatalf("not switched: active %q pending %q", p.status.ActiveServiceStatus.RayClusterName, p.status.PendingServiceStatus.RayClusterName)
	}
	for _, svc := range p.services {
		if svc.Spec.Selector[rayv1.LabelCluster] != "svc-new" {
			t.Errorf("Service %s selects %v", svc.Name, svc.Spec.Selector)
		}
	}
	if len(p.deleteClusters) != 0 || len(p.annotate) != 1 || *p.annotate[0].value != t0.Add(time.Minute).Format(time.RFC3339) {
		t.Fatalf("deletes %d, annotations %+v: want the old cluster marked for deletion in 60s", len(p.deleteClusters), p.annotate)
	}
	// Later reconciles: kept until the deadline, deleted after.
	rs.Status = p.status
	oldMarked := old.cluster.DeepCopy()
	oldMarked.Annotations[clusterbuild.AnnotationDeleteAfter] = *p.annotate[0].value
	for _, tc := range []struct {
		now    time.Time
		delete bool
	}{{t0.Add(59 * time.Second), false}, {t0.Add(60 * time.Second), true}} {
		p = computePlan(observed{rs: rs, now: tc.now, active: pending, clusters: []rayv1.RayCluster{*oldMarked, *pending.cluster}})
		if got := len(p.deleteClusters) == 1; got != tc.delete {
			t.Errorf("at +%s: delete %v, want %v", tc.now.Sub(t0), got, tc.delete)
		}
	}
}

// KubeRay's ENABLE_ZERO_DOWNTIME=false: a cluster spec change of a service that names no upgrade type brings no new
// cluster; an explicit NewCluster still does.
func TestPlanNoZeroDowntime(t *testing.T) {
	for _, tc := range []struct {
		name        string
		typ         *rayv1.RayServiceUpgradeType
		wantPending bool
	}{{"no type", nil, false}, {"explicit NewCluster", ptr.To(rayv1.NewCluster), true}} {
		t.Run(tc.name, func(t *testing.T) {
			rs := planService()
			active := readyCluster(rs, "svc-a")
			rs.Status.ActiveServiceStatus.RayClusterName = "svc-a"
			rs.Spec.RayClusterSpec.WorkerGroupSpecs[0].Template.Spec.Containers[0].Image = "other"
			if tc.typ != nil {
				rs.Spec.UpgradeStrategy = &rayv1.RayServiceUpgradeStrategy{Type: tc.typ}
			}
			p := computePlan(observed{rs: rs, now: t0, active: active, clusters: []rayv1.RayCluster{*active.cluster}, newName: names("svc-b"), noZeroDowntime: true})
			if got := p.status.PendingServiceStatus.RayClusterName != ""; got != tc.wantPending {
				t.Errorf("pending cluster %q", p.status.PendingServiceStatus.RayClusterName)
			}
			if p.status.ActiveServiceStatus.RayClusterName != "svc-a" {
				t.Errorf("active %q", p.status.ActiveServiceStatus.RayClusterName)
			}
		})
	}
}

func TestClusterAction(t *testing.T) {
	rs := planService()
	c := clusterbuild.RayServiceCluster(rs, "svc-a")
	spec := rs.Spec.RayClusterSpec.DeepCopy()
	if _, a := clusterAction(c, spec); a != actionSame {
		t.Errorf("unchanged spec: action %d", a)
	}
	spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](5)
	if u, a := clusterAction(c, spec); a != actionInPlace || *u.Spec.WorkerGroupSpecs[0].Replicas != 5 {
		t.Errorf("replicas: action %d", a)
	}
	g := spec.WorkerGroupSpecs[0].DeepCopy()
	g.GroupName = "more"
	spec.WorkerGroupSpecs = append(spec.WorkerGroupSpecs, *g)
	if u, a := clusterAction(c, spec); a != actionInPlace || len(u.Spec.WorkerGroupSpecs) != 2 || u.Annotations[clusterbuild.AnnotationNumWorkerGroups] != "2" {
		t.Errorf("appended group: action %d", a)
	}
	spec.WorkerGroupSpecs[0].Template.Spec.Containers[0].Image = "other"
	if _, a := clusterAction(c, spec); a != actionNew {
		t.Errorf("image change: action %d, want a new cluster", a)
	}
	removed := rs.Spec.RayClusterSpec.DeepCopy()
	removed.WorkerGroupSpecs = nil
	if _, a := clusterAction(c, removed); a != actionNew {
		t.Errorf("removed group: action %d, want a new cluster", a)
	}
}

// A cluster another operator built, or another Manta release hashed, is taken over in place, whatever its hash: an
// operator swap or upgrade never replaces a serving cluster. Once stamped, the user's changes count again.
func TestClusterActionTakeover(t *testing.T) {
	rs := planService()
	spec := rs.Spec.RayClusterSpec.DeepCopy()
	foreign := map[string]func(c *rayv1.RayCluster){
		"KubeRay v1.5.0": func(c *rayv1.RayCluster) {
			delete(c.Annotations, clusterbuild.AnnotationVersion)
			delete(c.Annotations, clusterbuild.AnnotationCommit)
			c.Annotations[clusterbuild.AnnotationClusterSpecHash] = "KUBERAYSHA1HASHBASE32HEX========"
			c.Annotations[clusterbuild.AnnotationKubeRayVersion] = "v1.5.0"
		},
		"Manta before the stamp": func(c *rayv1.RayCluster) {
			delete(c.Annotations, clusterbuild.AnnotationVersion)
			delete(c.Annotations, clusterbuild.AnnotationCommit)
		},
		"another Manta release hashing otherwise": func(c *rayv1.RayCluster) {
			c.Annotations[clusterbuild.AnnotationVersion] = "v0.0.1-older"
			c.Annotations[clusterbuild.AnnotationClusterSpecHash] = "hashed-otherwise"
		},
	}
	for name, mutate := range foreign {
		c := clusterbuild.RayServiceCluster(rs, "svc-a")
		mutate(c)
		u, a := clusterAction(c, spec)
		if a != actionInPlace {
			t.Errorf("%s: action %d, want the cluster kept and stamped in place", name, a)
			continue
		}
		if !equality.Semantic.DeepEqual(u.Spec, c.Spec) {
			t.Errorf("%s: taking over changed the spec", name)
		}
		if !clusterbuild.StampedByThisVersion(u.Annotations) || u.Annotations[clusterbuild.AnnotationKubeRayVersion] != "" ||
			u.Annotations[clusterbuild.AnnotationClusterSpecHash] != clusterbuild.RayServiceClusterHash(spec, len(spec.WorkerGroupSpecs)) {
			t.Errorf("%s: not stamped as this release's, or KubeRay's version kept over Manta's hash: %v", name, u.Annotations)
		}
		if _, a := clusterAction(u, spec); a != actionSame {
			t.Errorf("%s: stamped cluster, same spec: action %d, want the same", name, a)
		}
		changed := spec.DeepCopy()
		changed.HeadGroupSpec.Template.Spec.Containers[0].Image = "other"
		if _, a := clusterAction(u, changed); a != actionNew {
			t.Errorf("%s: stamped cluster, head image changed: action %d, want a new cluster", name, a)
		}
		removed := spec.DeepCopy()
		removed.WorkerGroupSpecs = nil
		if _, a := clusterAction(c, removed); a != actionNew {
			t.Errorf("%s: a worker group removed: action %d, want a new cluster", name, a)
		}
	}
}

// TestClusterActionJudgesForeignClustersBySpec: a cluster KubeRay created for the RayService carries KubeRay's hash
// (sha1 of its own types' JSON) under the same annotation. Taking the service over, Manta judges the cluster by its
// spec: the same spec is kept and stamped in place (not a new cluster, which would roll a serving RayService), a
// scaling change is made in place, an image change, or a cluster that drifted from its spec, needs a new cluster.
func TestClusterActionJudgesForeignClustersBySpec(t *testing.T) {
	rs := planService()
	const kuberayHash = "2MFLP1G1TDSMQ8BN3R6TC3IONUNCD1SC" // what KubeRay v1.5.0 writes: base32 of a sha1, upper case
	c := clusterbuild.RayServiceCluster(rs, "svc-a")
	delete(c.Annotations, clusterbuild.AnnotationVersion)
	delete(c.Annotations, clusterbuild.AnnotationCommit)
	c.Annotations[clusterbuild.AnnotationClusterSpecHash] = kuberayHash
	c.Annotations[clusterbuild.AnnotationKubeRayVersion] = "v1.5.0"
	spec := rs.Spec.RayClusterSpec.DeepCopy()
	if u, a := clusterAction(c, spec); a != actionInPlace || !equality.Semantic.DeepEqual(u.Spec, c.Spec) {
		t.Errorf("KubeRay's cluster of the same spec: action %d, want it kept and stamped in place", a)
	}
	spec.WorkerGroupSpecs[0].Replicas = ptr.To[int32](5)
	u, a := clusterAction(c, spec)
	if a != actionInPlace || *u.Spec.WorkerGroupSpecs[0].Replicas != 5 {
		t.Errorf("KubeRay's cluster, replicas changed: action %d, want in place", a)
	}
	// Manta's hash now, and no KubeRay version: KubeRay, started again, re-stamps the cluster rather than judging
	// Manta's hash as its own.
	if _, ok := u.Annotations[clusterbuild.AnnotationKubeRayVersion]; ok || u.Annotations[clusterbuild.AnnotationClusterSpecHash] == kuberayHash {
		t.Errorf("after an in-place update: annotations %v, want Manta's hash and no %s", u.Annotations, clusterbuild.AnnotationKubeRayVersion)
	}
	spec.WorkerGroupSpecs[0].Template.Spec.Containers[0].Image = "other"
	if _, a := clusterAction(c, spec); a != actionNew {
		t.Errorf("KubeRay's cluster, image changed: action %d, want a new cluster", a)
	}
	// A cluster whose spec has drifted from what its foreign hash stood for is judged by its spec too.
	drifted := c.DeepCopy()
	drifted.Spec.HeadGroupSpec.Template.Spec.Containers[0].Image = "other"
	if _, a := clusterAction(drifted, rs.Spec.RayClusterSpec.DeepCopy()); a != actionNew {
		t.Errorf("a cluster of another spec with a foreign hash: action %d, want a new cluster", a)
	}
	if c.Annotations[clusterbuild.AnnotationClusterSpecHash] != kuberayHash {
		t.Errorf("clusterAction rewrote its argument's hash: %q", c.Annotations[clusterbuild.AnnotationClusterSpecHash])
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*rayv1.RayService)
		want   string
	}{
		"long name":  {func(rs *rayv1.RayService) { rs.Name = strings.Repeat("a", 48) }, "metadata.name"},
		"bad config": {func(rs *rayv1.RayService) { rs.Spec.ServeConfigV2 = "- a list" }, "spec.serveConfigV2"},
		"incremental": {func(rs *rayv1.RayService) {
			rs.Spec.UpgradeStrategy = &rayv1.RayServiceUpgradeStrategy{Type: ptr.To(rayv1.NewClusterWithIncrementalUpgrade)}
		}, "spec.upgradeStrategy.clusterUpgradeOptions: required"},
		"options": {func(rs *rayv1.RayService) {
			rs.Spec.UpgradeStrategy = &rayv1.RayServiceUpgradeStrategy{ClusterUpgradeOptions: &rayv1.ClusterUpgradeOptions{}}
		}, "spec.upgradeStrategy.clusterUpgradeOptions"},
		"no container":    {func(rs *rayv1.RayService) { rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers = nil }, "spec.rayClusterConfig.headGroupSpec"},
		"timeout":         {func(rs *rayv1.RayService) { rs.Annotations = map[string]string{AnnotationInitializingTimeout: "soon"} }, "metadata.annotations[ray.io/initializing-timeout]"},
		"cluster suspend": {func(rs *rayv1.RayService) { rs.Spec.RayClusterSpec.Suspend = ptr.To(true) }, "spec.rayClusterConfig.suspend"},
		"head service name": {func(rs *rayv1.RayService) {
			rs.Spec.RayClusterSpec.HeadGroupSpec.HeadService = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "fixed"}}
		}, "spec.rayClusterConfig.headGroupSpec.headService.metadata.name"},
		"cluster managedBy": {func(rs *rayv1.RayService) { rs.Spec.RayClusterSpec.ManagedBy = ptr.To("kueue.x-k8s.io/multikueue") }, "spec.rayClusterConfig.managedBy"},
		// The RayCluster rules apply to rayClusterConfig, naming the field under it.
		"cluster rule: group resources": {func(rs *rayv1.RayService) {
			g := &rs.Spec.RayClusterSpec.WorkerGroupSpecs[0]
			g.Resources = map[string]string{"CPU": "lots"}
		}, "spec.rayClusterConfig.workerGroupSpecs[0].resources[CPU]: \"lots\" is not a quantity"},
		"cluster rule: autoscaler v2 without autoscaling": {func(rs *rayv1.RayService) {
			c := &rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0]
			c.Env = append(c.Env, corev1.EnvVar{Name: "RAY_enable_autoscaler_v2", Value: "1"})
		}, `spec.rayClusterConfig.headGroupSpec.template.spec.containers[0].env[RAY_enable_autoscaler_v2]: "1" asks for autoscaler v2, which needs spec.rayClusterConfig.enableInTreeAutoscaling: true`},
		// KubeRay refuses Kubernetes token auth for a RayService's clusters: its calls carry the shared token.
		"k8s token auth": {func(rs *rayv1.RayService) {
			rs.Spec.RayClusterSpec.RayVersion = "2.55.0"
			rs.Spec.RayClusterSpec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken, EnableK8sTokenAuth: ptr.To(true)}
		}, "spec.rayClusterConfig.authOptions.enableK8sTokenAuth"},
		"cluster rule: token auth needs Ray 2.52": {func(rs *rayv1.RayService) {
			rs.Spec.RayClusterSpec.RayVersion = "2.50.0"
			rs.Spec.RayClusterSpec.AuthOptions = &rayv1.AuthOptions{Mode: rayv1.AuthModeToken}
		}, "spec.rayClusterConfig.rayVersion: 2.50.0: spec.rayClusterConfig.authOptions.mode: token needs Ray 2.52.0 or later"},
	} {
		rs := planService()
		tc.mutate(rs)
		if got := validation.Message(validate(rs)); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want it to start with %q", name, got, tc.want)
		}
	}
	if got := validation.Message(validate(planService())); got != "" {
		t.Errorf("valid service: %q", got)
	}
	rs := planService()
	rs.Spec.ServiceUnhealthySecondThreshold = ptr.To[int32](10)
	rs.Spec.RayClusterSpec.AutoscalerOptions = &rayv1.AutoscalerOptions{}
	got := strings.Join(unsupportedFields(rs), ";")
	for _, want := range []string{"spec.serviceUnhealthySecondThreshold", "spec.rayClusterConfig.autoscalerOptions"} {
		if !strings.Contains(got, want) {
			t.Errorf("unsupported fields %q lack %s", got, want)
		}
	}
}

func TestInitializingTimeout(t *testing.T) {
	rs := planService()
	rs.Annotations = map[string]string{AnnotationInitializingTimeout: "30s"}
	rs.Status.Conditions = []metav1.Condition{{Type: string(rayv1.RayServiceReady), Status: metav1.ConditionFalse,
		Reason: string(rayv1.RayServiceInitializing), LastTransitionTime: metav1.NewTime(t0), ObservedGeneration: 1}}
	rs.Status.PendingServiceStatus.RayClusterName = "svc-a"
	c := clusterbuild.RayServiceCluster(rs, "svc-a")
	p := computePlan(observed{rs: rs, now: t0.Add(29 * time.Second), pending: &clusterObs{cluster: c}, clusters: []rayv1.RayCluster{*c}})
	if len(p.deleteClusters) != 0 {
		t.Fatal("deleted before the timeout")
	}
	p = computePlan(observed{rs: rs, now: t0.Add(31 * time.Second), pending: &clusterObs{cluster: c}, clusters: []rayv1.RayCluster{*c}})
	r := meta.FindStatusCondition(p.status.Conditions, string(rayv1.RayServiceReady))
	if r.Reason != string(rayv1.RayServiceInitializingTimeout) || len(p.deleteClusters) != 1 || p.status.PendingServiceStatus.RayClusterName != "" {
		t.Fatalf("Ready %+v, deletes %d", r, len(p.deleteClusters))
	}
	// Terminal until the spec changes; then initializing starts over, timed from then.
	rs.Status = p.status
	p = computePlan(observed{rs: rs, now: t0.Add(time.Hour), newName: names("svc-b")})
	if r := meta.FindStatusCondition(p.status.Conditions, string(rayv1.RayServiceReady)); r.Reason != string(rayv1.RayServiceInitializingTimeout) || p.status.PendingServiceStatus.RayClusterName != "" {
		t.Fatalf("timed-out service restarted without a spec change: Ready %+v", r)
	}
	rs.Generation = 2
	p = computePlan(observed{rs: rs, now: t0.Add(time.Hour), newName: names("svc-b")})
	r = meta.FindStatusCondition(p.status.Conditions, string(rayv1.RayServiceReady))
	if r.Reason != string(rayv1.RayServiceInitializing) || !r.LastTransitionTime.Time.Equal(t0.Add(time.Hour)) || p.status.PendingServiceStatus.RayClusterName != "svc-b" {
		t.Fatalf("after a spec change: Ready %+v, pending %q", r, p.status.PendingServiceStatus.RayClusterName)
	}
}

// As KubeRay v1.7: resuming a suspended service starts its initializing timeout over, from the resume, however long
// the suspension lasted; the resumed attempt times out on its own clock.
func TestInitializingTimeoutRearmedOnResume(t *testing.T) {
	rs := planService()
	rs.Annotations = map[string]string{AnnotationInitializingTimeout: "30s"}
	rs.Status.Conditions = []metav1.Condition{
		{Type: string(rayv1.RayServiceReady), Status: metav1.ConditionFalse, Reason: string(rayv1.RayServiceSuspendComplete), LastTransitionTime: metav1.NewTime(t0), ObservedGeneration: 1},
		{Type: string(rayv1.RayServiceSuspended), Status: metav1.ConditionTrue, Reason: string(rayv1.RayServiceSuspendComplete), LastTransitionTime: metav1.NewTime(t0), ObservedGeneration: 1},
	}
	resumed := t0.Add(time.Hour)
	p := computePlan(observed{rs: rs, now: resumed, newName: names("svc-a")})
	r := meta.FindStatusCondition(p.status.Conditions, string(rayv1.RayServiceReady))
	if r.Reason != string(rayv1.RayServiceInitializing) || !r.LastTransitionTime.Time.Equal(resumed) || len(p.deleteClusters) != 0 {
		t.Fatalf("after resume: Ready %+v, deletes %d", r, len(p.deleteClusters))
	}
	if s := meta.FindStatusCondition(p.status.Conditions, string(rayv1.RayServiceSuspended)); s.Status != metav1.ConditionFalse || s.Reason != string(rayv1.RayServiceResumed) {
		t.Fatalf("Suspended %+v", s)
	}
	rs.Status = p.status
	c := clusterbuild.RayServiceCluster(rs, "svc-a")
	obs := func(now time.Time) observed {
		return observed{rs: rs, now: now, pending: &clusterObs{cluster: c}, clusters: []rayv1.RayCluster{*c}}
	}
	if p := computePlan(obs(resumed.Add(29 * time.Second))); len(p.deleteClusters) != 0 {
		t.Fatal("timed out within 30 s of the resume")
	}
	p = computePlan(obs(resumed.Add(31 * time.Second)))
	if r := meta.FindStatusCondition(p.status.Conditions, string(rayv1.RayServiceReady)); r.Reason != string(rayv1.RayServiceInitializingTimeout) || len(p.deleteClusters) != 1 {
		t.Fatalf("31 s after the resume: Ready %+v, deletes %d", r, len(p.deleteClusters))
	}
}

// With no deletion delay, the old cluster goes only after the status that stopped naming it is stored: a lost
// status write must not leave the status naming a deleted cluster as active.
func TestPlanZeroDelayDeletesAfterStatusStored(t *testing.T) {
	rs := planService()
	rs.Spec.RayClusterDeletionDelaySeconds = ptr.To[int32](0)
	old := readyCluster(rs, "svc-old")
	rs.Status.ActiveServiceStatus.RayClusterName = "svc-old"
	rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:new"
	rs.Status.PendingServiceStatus.RayClusterName = "svc-new"
	pending := readyCluster(rs, "svc-new")
	clusters := []rayv1.RayCluster{*old.cluster, *pending.cluster}
	p := computePlan(observed{rs: rs, now: t0, active: old, pending: pending, clusters: clusters})
	if p.status.ActiveServiceStatus.RayClusterName != "svc-new" {
		t.Fatalf("not switched")
	}
	if len(p.deleteClusters) != 0 {
		t.Fatalf("deleted %s in the reconcile that switched away from it", p.deleteClusters[0].Name)
	}
	rs.Status = p.status
	p = computePlan(observed{rs: rs, now: t0, active: pending, clusters: clusters})
	if len(p.deleteClusters) != 1 || p.deleteClusters[0].Name != "svc-old" {
		t.Fatalf("deletes %v, want svc-old", p.deleteClusters)
	}
}

// The Ready and UpgradeInProgress conditions carry KubeRay v1.5.0's reasons and messages through a service's life:
// initializing, serving, upgrading, and an active cluster deleted by someone (Unknown).
func TestPlanConditionsAsKubeRay(t *testing.T) {
	type want struct {
		status  metav1.ConditionStatus
		reason  rayv1.RayServiceConditionReason
		message string
	}
	check := func(step string, p *plan, ready, upgrade want) {
		t.Helper()
		for _, c := range []struct {
			typ rayv1.RayServiceConditionType
			w   want
		}{{rayv1.RayServiceReady, ready}, {rayv1.UpgradeInProgress, upgrade}} {
			got := meta.FindStatusCondition(p.status.Conditions, string(c.typ))
			if got == nil || got.Status != c.w.status || got.Reason != string(c.w.reason) || got.Message != c.w.message || got.ObservedGeneration != 1 {
				t.Errorf("%s: %s %+v, want %+v", step, c.typ, got, c.w)
			}
		}
	}
	initializing := want{metav1.ConditionFalse, rayv1.RayServiceInitializing, "RayService is initializing"}

	rs := planService()
	p := computePlan(observed{rs: rs, now: t0, newName: names("svc-a")})
	check("new", p, initializing, initializing)

	rs.Status = p.status
	p = computePlan(observed{rs: rs, now: t0, pending: readyCluster(rs, "svc-a"), newName: names("svc-x")})
	serving := want{metav1.ConditionTrue, rayv1.NonZeroServeEndpoints, "Number of serve endpoints is greater than 0"}
	noPending := want{metav1.ConditionFalse, rayv1.NoPendingCluster, "Active Ray cluster exists and no pending Ray cluster"}
	check("promoted", p, serving, noPending)

	rs.Status = p.status
	active := readyCluster(rs, "svc-a")
	rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:new"
	p = computePlan(observed{rs: rs, now: t0, active: active, clusters: []rayv1.RayCluster{*active.cluster}, newName: names("svc-b")})
	check("upgrading", p, serving, want{metav1.ConditionTrue, rayv1.BothActivePendingClustersExist, "Both active and pending Ray clusters exist"})

	rs.Status = p.status
	rs.Status.PendingServiceStatus = rayv1.RayServiceStatus{}
	rs.Status.NumServeEndpoints = 0
	p = computePlan(observed{rs: rs, now: t0, active: &clusterObs{}, newName: names("svc-c")})
	// The active cluster is gone: no endpoints left, and no active cluster though the service was serving.
	check("active deleted", p, want{metav1.ConditionFalse, rayv1.ZeroServeEndpoints, "Number of serve endpoints dropped to 0"},
		want{metav1.ConditionUnknown, rayv1.NoActiveCluster, "No active Ray cluster exists, and the RayService is not initializing"})
}

// kubeRayBuilt makes c look as KubeRay v1.5.0 built it: KubeRay's hash under the shared key, its version, no stamp.
func kubeRayBuilt(c *rayv1.RayCluster) {
	delete(c.Annotations, clusterbuild.AnnotationVersion)
	delete(c.Annotations, clusterbuild.AnnotationCommit)
	c.Annotations[clusterbuild.AnnotationClusterSpecHash] = "KUBERAYSHA1HASHBASE32HEX========"
	c.Annotations[clusterbuild.AnnotationKubeRayVersion] = "v1.5.0"
}

// A RayService taken over from KubeRay keeps its serving cluster; taken over in the middle of an upgrade, the
// upgrade goes on with KubeRay's pending cluster, and the active one is not stamped as if it held the new spec.
func TestPlanTakeoverFromKubeRay(t *testing.T) {
	rs := planService()
	active := readyCluster(rs, "svc-old")
	kubeRayBuilt(active.cluster)
	rs.Status.ActiveServiceStatus.RayClusterName = "svc-old"
	p := computePlan(observed{rs: rs, now: t0, active: active, clusters: []rayv1.RayCluster{*active.cluster}})
	if n := p.status.PendingServiceStatus.RayClusterName; n != "" || p.createCluster != nil || len(p.deleteClusters) != 0 {
		t.Fatalf("serving KubeRay cluster: pending %q, create %v, delete %d: want it kept", n, p.createCluster != nil, len(p.deleteClusters))
	}
	if len(p.updateClusters) != 1 || !clusterbuild.StampedByThisVersion(p.updateClusters[0].Annotations) {
		t.Fatalf("serving KubeRay cluster: updates %d, want it stamped in place", len(p.updateClusters))
	}

	// Mid-upgrade: the spec moved on, KubeRay brought the pending cluster up for it.
	rs.Spec.RayClusterSpec.HeadGroupSpec.Template.Spec.Containers[0].Image = "ray:new"
	rs.Status.PendingServiceStatus.RayClusterName = "svc-new"
	pending := readyCluster(rs, "svc-new")
	pending.pods[0].Labels[rayv1.LabelServe] = "false" // no serve endpoint yet: traffic stays
	kubeRayBuilt(pending.cluster)
	p = computePlan(observed{rs: rs, now: t0, active: active, pending: pending, clusters: []rayv1.RayCluster{*active.cluster, *pending.cluster}})
	if p.status.PendingServiceStatus.RayClusterName != "svc-new" || p.createCluster != nil || len(p.deleteClusters) != 0 {
		t.Fatalf("mid-upgrade: pending %q, create %v, delete %d: want the upgrade to go on with svc-new",
			p.status.PendingServiceStatus.RayClusterName, p.createCluster != nil, len(p.deleteClusters))
	}
	for _, u := range p.updateClusters {
		if u.Name != "svc-new" {
			t.Errorf("mid-upgrade: %s updated; only the pending cluster is stamped", u.Name)
		}
	}
	if len(p.updateClusters) != 1 {
		t.Errorf("mid-upgrade: %d clusters updated, want the pending one stamped", len(p.updateClusters))
	}
}

// A head that just turned Ready behind a Service that routes to no endpoint yet (the API server's proxy answered
// "no endpoints available") is not sent its Serve config, so no failed update is reported for the endpoints
// controller's lag; it is looked at again shortly, and past routeGrace the config is sent whatever the Service says.
func TestPlanServeConfigWaitsForTheServiceRoute(t *testing.T) {
	rs := planService()
	rs.Status.PendingServiceStatus.RayClusterName = "svc-first"
	c := readyCluster(rs, "svc-first")
	delete(c.cluster.Annotations, clusterbuild.AnnotationServeConfigHash)
	c.details = nil
	c.detailsErr = fmt.Errorf("get serve details: %w", ray.ErrNoEndpoints)
	c.head.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0)
	obs := func(now time.Time) observed {
		return observed{rs: rs, now: now, pending: c, clusters: []rayv1.RayCluster{*c.cluster}}
	}

	p := computePlan(obs(t0.Add(time.Second)))
	if len(p.apply) != 0 {
		t.Fatalf("config sent to a head the Service does not route to yet: %+v", p.apply)
	}
	if d := p.RequeueAfter(); d <= 0 || d > routeRetry {
		t.Errorf("requeue after %v, want at most %v", d, routeRetry)
	}

	if p = computePlan(obs(t0.Add(routeGrace))); len(p.apply) != 1 {
		t.Errorf("past the grace: %d applies, want the config sent (and its failure reported)", len(p.apply))
	}

	// Any other failure to read the head is Ray's or the network's: the config is sent, as before.
	c.detailsErr = fmt.Errorf("get serve details: %w", ray.ErrUnavailable)
	if p = computePlan(obs(t0.Add(time.Second))); len(p.apply) != 1 {
		t.Errorf("head unavailable: %d applies, want the config sent", len(p.apply))
	}
	// A Service that routes: sent at once.
	c.detailsErr, c.details = nil, &ray.ServeDetails{}
	if p = computePlan(obs(t0.Add(time.Second))); len(p.apply) != 1 {
		t.Errorf("routed: %d applies, want the config sent", len(p.apply))
	}
}
