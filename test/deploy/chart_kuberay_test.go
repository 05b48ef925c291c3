package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/features"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/testutil"
)

// testdata/kuberay-values.yaml is installed as this release in this namespace.
const (
	kubeRayRelease = "kuberay"
	kubeRayNS      = "ray-system"
	kubeRayOp      = "kuberay-manta-operator"
)

// checkKubeRayValues: every value of testdata/kuberay-values.yaml (KubeRay's keys only) shows in what the chart
// renders, with KubeRay's meaning.
func checkKubeRayValues(t *testing.T, objs []*unstructured.Unstructured) {
	d := typed[appsv1.Deployment](t, objs, "Deployment", kubeRayOp)
	c := onlyContainer(t, d)
	pod := d.Spec.Template
	const img = "registry.example.com/platform/manta:v0.1.0"
	if *d.Spec.Replicas != 2 || c.Image != img || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("replicas %d, image %s (%s): want 2, %s", *d.Spec.Replicas, c.Image, c.ImagePullPolicy, img)
	}
	if !slices.Equal(c.Command, []string{"/manager"}) || len(c.Args) == 0 || c.Args[0] == "operator" {
		t.Errorf("operatorCommand /manager: command %v, args %v; want /manager with the operator's flags only", c.Command, c.Args)
	}
	wantArgs := map[string]string{
		"--puller-image": img, "--metrics-secure": "true", "--metrics-addr": ":8080", "--enable-metrics": "true", "--health-probe-bind-address": ":8082",
		"--enable-leader-election": "true", "--leader-election-namespace": kubeRayNS,
		"--leader-elect-lease-duration": "15s", "--leader-elect-renew-deadline": "10s", "--leader-elect-retry-period": "2s",
		"--use-kubernetes-proxy": "true", "--cluster-domain": "corp.local", "--image-pull-tolerate-all-taints": "false",
		"--reconcile-concurrency": "4", "--qps": "50", "--burst": "100", "--event-qps": "1000", "--event-burst": "2000",
		"--gc-percent": "60", "--adaptive-procs": "true", "--status-coalesce-window": "10s",
		"--gcs-ft-redis-cleanup": "false", "--batch-scheduler": "yunikorn", "--watch-namespace": "team-a,team-b",
		"--feature-gates": "RayClusterStatusConditions=true,RayJobDeletionPolicy=true,RayMultiHostIndexing=true," +
			"RayServiceIncrementalUpgrade=true,RayCronJob=true,RayClusterMTLS=false,RayClusterNetworkPolicy=false,RayClusterHistoryServer=false",
		"--log-stdout-encoder": "console", "--log-file-encoder": "json", "--log-file-path": "/var/log/kuberay/kuberay-operator.log",
	}
	if got := flagValues(c.Args); !equalJSON(got, wantArgs) {
		t.Errorf("operator args\n%v\nwant\n%v", got, wantArgs)
	}
	// --help parses the gates' flag but not its value: the operator reads that at start.
	if _, err := features.Parse(flagValues(c.Args)["--feature-gates"]); err != nil {
		t.Errorf("the operator would refuse the feature gates: %v", err)
	}
	wantEnv := []corev1.EnvVar{{Name: "ENABLE_INIT_CONTAINER_INJECTION", Value: "true"}, {Name: "CLUSTER_DOMAIN", Value: "corp.local"},
		{Name: "ENABLE_GCS_FT_REDIS_CLEANUP", Value: "false"}, {Name: "RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS", Value: "600"},
		{Name: "DELETE_RAYJOB_CR_AFTER_JOB_FINISHES", Value: "false"}}
	if !equalJSON(c.Env, wantEnv) {
		t.Errorf("env %v, want %v", c.Env, wantEnv)
	}
	if d.Labels["team"] != "ml-platform" || d.Labels["cost-center"] != "4711" || pod.Labels["team"] != "ml-platform" ||
		pod.Annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] != "false" || len(pod.Annotations) != 1 {
		t.Errorf("labels: Deployment %v, pod %v; pod annotations %v", d.Labels, pod.Labels, pod.Annotations)
	}
	ps := pod.Spec
	if ps.ServiceAccountName != "kuberay-operator" || ps.PriorityClassName != "ray-platform-critical" ||
		!equalJSON(ps.NodeSelector, map[string]string{"kubernetes.io/os": "linux"}) ||
		!equalJSON(ps.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "platform-registry"}}) ||
		!equalJSON(ps.Tolerations, []corev1.Toleration{{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists}}) ||
		ps.Affinity == nil || ps.Affinity.NodeAffinity == nil || len(ps.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		ps.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].Weight != 50 {
		t.Errorf("pod spec: serviceAccount %s, priorityClass %s, nodeSelector %v, pull secrets %v, tolerations %v, affinity %+v",
			ps.ServiceAccountName, ps.PriorityClassName, ps.NodeSelector, ps.ImagePullSecrets, ps.Tolerations, ps.Affinity)
	}
	wantRes := corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	if !equalJSON(c.Resources, wantRes) {
		t.Errorf("resources %v, want %v", c.Resources, wantRes)
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.InitialDelaySeconds != 10 || p.PeriodSeconds != 5 || p.FailureThreshold != 5 || p.HTTPGet == nil || p.HTTPGet.Port.String() != "health" {
			t.Errorf("%s probe %+v: want KubeRay's timing (10s, 5s, 5 failures) on the health port", name, p)
		}
	}
	args := flagValues(c.Args)
	checkPort(t, d, c, "--metrics-addr", args, "metrics")
	checkPort(t, d, c, "--health-probe-bind-address", args, "health")
	// podSecurityContext: {} in the file leaves the chart's restricted defaults (Helm merges maps).
	checkSecurity(t, d, c)
	// The log file's directory: an emptyDir of sizeLimit, writable under the read-only root filesystem.
	var logVol *corev1.Volume
	for i := range ps.Volumes {
		if ps.Volumes[i].Name == "logs" {
			logVol = &ps.Volumes[i]
		}
	}
	if logVol == nil || logVol.EmptyDir == nil || logVol.EmptyDir.SizeLimit == nil || logVol.EmptyDir.SizeLimit.String() != "500Mi" ||
		!equalJSON(c.VolumeMounts, []corev1.VolumeMount{{Name: "logs", MountPath: "/var/log/kuberay"}}) {
		t.Errorf("log volume %+v, mounts %+v: want an emptyDir of 500Mi at /var/log/kuberay", logVol, c.VolumeMounts)
	}

	if find(objs, "ServiceAccount", "kuberay-operator") == nil {
		t.Error("serviceAccount.create: no ServiceAccount kuberay-operator")
	}
	svc := typed[corev1.Service](t, objs, "Service", kubeRayOp+"-metrics")
	checkSelects(t, svc, d, "metrics")
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.Ports[0].Port != 8080 {
		t.Errorf("metrics Service %s port %d: want ClusterIP 8080", svc.Spec.Type, svc.Spec.Ports[0].Port)
	}
	sms := kinds(objs, "ServiceMonitor")
	if len(sms) != 1 {
		t.Fatalf("metrics.serviceMonitor.enabled renders %d ServiceMonitors", len(sms))
	}
	eps, _, _ := unstructured.NestedSlice(sms[0].Object, "spec", "endpoints")
	if sms[0].GetNamespace() != kubeRayNS || sms[0].GetLabels()["release"] != "prometheus" || len(eps) != 1 ||
		eps[0].(map[string]any)["interval"] != "60s" || eps[0].(map[string]any)["honorLabels"] != true {
		t.Errorf("ServiceMonitor %s/%s labels %v endpoints %v", sms[0].GetNamespace(), sms[0].GetName(), sms[0].GetLabels(), eps)
	}

	// RBAC for the named ServiceAccount: a Role in each watched namespace (and the proxy Role, useKubernetesProxy),
	// the cluster-scoped rest in a ClusterRole, leader election in the release namespace.
	sa := rbacv1.Subject{Kind: "ServiceAccount", Name: "kuberay-operator", Namespace: kubeRayNS}
	want := []string{"ClusterRoleBinding /" + kubeRayOp, "RoleBinding ray-system/" + kubeRayOp + "-leader-election"}
	for _, ns := range []string{"team-a", "team-b"} {
		want = append(want, "RoleBinding "+ns+"/"+kubeRayOp, "RoleBinding "+ns+"/"+kubeRayOp+"-proxy")
	}
	var got []string
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, o := range kinds(objs, kind) {
			var b rbacv1.RoleBinding
			if err := runtimeFrom(o, &b); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(b.Subjects, sa) {
				got = append(got, kind+" "+o.GetNamespace()+"/"+o.GetName())
			}
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("bindings of ServiceAccount kuberay-operator: %v, want %v", got, want)
	}
	checkUserRoles(t, objs)
}

// checkUserRoles: the end users' ClusterRoles KubeRay v1.7.0's chart renders (rayjob, rayservice and raycronjob
// editor and viewer roles: these names, these rules), and the same for RayCluster and ImagePullJob.
func checkUserRoles(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, k := range []struct{ group, kind string }{{"ray.io", "raycluster"}, {"ray.io", "rayjob"}, {"ray.io", "rayservice"}, {"ray.io", "raycronjob"}, {"manta.dev", "imagepulljob"}} {
		for role, verbs := range map[string][]string{"editor": {"create", "delete", "get", "list", "patch", "update", "watch"}, "viewer": {"get", "list", "watch"}} {
			name := k.kind + "-" + role + "-role"
			if find(objs, "ClusterRole", name) == nil {
				t.Errorf("no ClusterRole %s", name)
				continue
			}
			want := []rbacv1.PolicyRule{
				{APIGroups: []string{k.group}, Resources: []string{k.kind + "s"}, Verbs: verbs},
				{APIGroups: []string{k.group}, Resources: []string{k.kind + "s/status"}, Verbs: []string{"get"}},
			}
			if got := typed[rbacv1.ClusterRole](t, objs, "ClusterRole", name).Rules; !equalJSON(got, want) {
				t.Errorf("ClusterRole %s rules %v, want %v", name, got, want)
			}
		}
	}
}

// checkKubeRaySwitches renders KubeRay's switches one at a time and checks what each changes.
func checkKubeRaySwitches(t *testing.T, root string) {
	op := func(objs []*unstructured.Unstructured, name string) (*appsv1.Deployment, map[string]string) {
		t.Helper()
		d := typed[appsv1.Deployment](t, objs, "Deployment", name)
		return d, flagValues(onlyContainer(t, d).Args)
	}
	// Names: fullnameOverride is every object's prefix; nameOverride the name label; componentOverride the operator's component.
	objs := mustHelmTemplate(t, root, "r", namespace, map[string]any{"fullnameOverride": "ray-ops", "nameOverride": "kuberay-operator", "componentOverride": "kuberay-operator"})
	d, _ := op(objs, "ray-ops-operator")
	if d.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != "kuberay-operator" || d.Spec.Template.Labels["app.kubernetes.io/component"] != "kuberay-operator" ||
		find(objs, "Deployment", "ray-ops-apiserver") == nil || find(objs, "ServiceAccount", "ray-ops-operator") == nil {
		t.Errorf("name overrides: operator selector %v, pod labels %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
	checkSelects(t, typed[corev1.Service](t, objs, "Service", "ray-ops-operator-metrics"), d, "metrics")

	// singleNamespaceInstall: the release namespace watched, its permissions as a Role there, no end-user ClusterRoles;
	// only the cluster-scoped rules Manta's operator needs stay in a ClusterRole.
	objs = mustHelmTemplate(t, root, "manta", namespace, map[string]any{"singleNamespaceInstall": true, "apiserver": map[string]any{"enabled": false}})
	if _, a := op(objs, "manta-operator"); a["--watch-namespace"] != namespace {
		t.Errorf("singleNamespaceInstall: --watch-namespace=%q, want %s", a["--watch-namespace"], namespace)
	}
	var clusterRoles []string
	for _, o := range kinds(objs, "ClusterRole") {
		clusterRoles = append(clusterRoles, o.GetName())
	}
	if !slices.Equal(clusterRoles, []string{"manta-operator"}) || find(objs, "Role", "manta-operator") == nil {
		t.Errorf("singleNamespaceInstall: ClusterRoles %v (want only manta-operator, its cluster-scoped rules), Role manta-operator %v", clusterRoles, find(objs, "Role", "manta-operator") != nil)
	}
	for _, r := range typed[rbacv1.ClusterRole](t, objs, "ClusterRole", "manta-operator").Rules {
		for _, res := range r.Resources {
			if !clusterScoped[res] {
				t.Errorf("singleNamespaceInstall: ClusterRole manta-operator grants %s, which has a namespace", res)
			}
		}
	}
	// crNamespacedRbacEnable=false with it: the namespace's Role is left to the user; leader election stays.
	objs = mustHelmTemplate(t, root, "manta", namespace, map[string]any{"singleNamespaceInstall": true, "crNamespacedRbacEnable": false})
	if find(objs, "Role", "manta-operator") != nil || find(objs, "Role", "manta-operator-leader-election") == nil {
		t.Error("crNamespacedRbacEnable=false: want no Role manta-operator and the leader election Role")
	}
	// Without singleNamespaceInstall it changes nothing (KubeRay's meaning).
	if a, b := mustHelmTemplate(t, root, "manta", namespace, map[string]any{"watchNamespace": []string{"team-a"}, "crNamespacedRbacEnable": false}),
		mustHelmTemplate(t, root, "manta", namespace, map[string]any{"watchNamespace": []string{"team-a"}}); !equalJSON(grants(t, a), grants(t, b)) {
		t.Error("crNamespacedRbacEnable=false without singleNamespaceInstall changed the RBAC")
	}
	// rbacEnable=false: no RBAC object at all; ServiceAccounts stay.
	objs = mustHelmTemplate(t, root, "manta", namespace, map[string]any{"rbacEnable": false})
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		if n := len(kinds(objs, kind)); n > 0 {
			t.Errorf("rbacEnable=false renders %d %s", n, kind)
		}
	}
	if find(objs, "ServiceAccount", "manta-operator") == nil {
		t.Error("rbacEnable=false: no operator ServiceAccount")
	}
	// userRoles.enabled=false: installable beside a KubeRay release that owns the same role names.
	if objs := mustHelmTemplate(t, root, "manta", namespace, map[string]any{"userRoles": map[string]any{"enabled": false}}); find(objs, "ClusterRole", "rayjob-editor-role") != nil {
		t.Error("userRoles.enabled=false renders rayjob-editor-role")
	}
	// serviceAccount.create=false: the named (or the default) ServiceAccount, bound but not created.
	objs = mustHelmTemplate(t, root, "manta", namespace, map[string]any{"serviceAccount": map[string]any{"create": false}})
	if d, _ := op(objs, "manta-operator"); d.Spec.Template.Spec.ServiceAccountName != "default" || find(objs, "ServiceAccount", "manta-operator") != nil {
		t.Errorf("serviceAccount.create=false: pod runs as %q", d.Spec.Template.Spec.ServiceAccountName)
	}
	// metrics.enabled=false: KubeRay's kuberay_* series off; the endpoint and its Service stay.
	objs = mustHelmTemplate(t, root, "manta", namespace, map[string]any{"metrics": map[string]any{"enabled": false}})
	if _, a := op(objs, "manta-operator"); a["--enable-metrics"] != "false" || a["--metrics-addr"] != ":8080" || find(objs, "Service", "manta-operator-metrics") == nil {
		t.Errorf("metrics.enabled=false: args %v", a)
	}
	// batchScheduler.enabled: KubeRay's deprecated spelling of volcano.
	if _, a := op(mustHelmTemplate(t, root, "manta", namespace, map[string]any{"batchScheduler": map[string]any{"enabled": true}}), "manta-operator"); a["--batch-scheduler"] != "volcano" {
		t.Errorf("batchScheduler.enabled: --batch-scheduler=%q", a["--batch-scheduler"])
	}
	// GOGC in env: the operator reads it, so the chart passes no --gc-percent that would win over it.
	if _, a := op(mustHelmTemplate(t, root, "manta", namespace, map[string]any{"env": []map[string]string{{"name": "GOGC", "value": "60"}}}), "manta-operator"); a["--gc-percent"] != "" {
		t.Errorf("env GOGC: --gc-percent=%s", a["--gc-percent"])
	}
	// A partial operator.resources keeps the rest of its default (Helm merges it); KubeRay's resources replaces it whole.
	d, _ = op(mustHelmTemplate(t, root, "manta", namespace, map[string]any{"operator": map[string]any{"resources": map[string]any{"requests": map[string]string{"cpu": "10m"}}}}), "manta-operator")
	if r := onlyContainer(t, d).Resources; r.Requests.Cpu().String() != "10m" || r.Requests.Memory().String() != "256Mi" || r.Limits.Memory().String() != "1Gi" {
		t.Errorf("operator.resources.requests.cpu alone: resources %v, want the default's other values kept", r)
	}
	d, _ = op(mustHelmTemplate(t, root, "manta", namespace, map[string]any{"resources": map[string]any{"limits": map[string]string{"memory": "512Mi"}}}), "manta-operator")
	if r := onlyContainer(t, d).Resources; len(r.Requests) != 0 || len(r.Limits) != 1 || r.Limits.Memory().String() != "512Mi" {
		t.Errorf("KubeRay's resources: %v, want exactly its value", r)
	}
	// operatorCommand /manta: the default spelled out, with the subcommand.
	d, _ = op(mustHelmTemplate(t, root, "manta", namespace, map[string]any{"operatorCommand": "/manta"}), "manta-operator")
	if c := onlyContainer(t, d); !slices.Equal(c.Command, []string{"/manta"}) || c.Args[0] != "operator" {
		t.Errorf("operatorCommand /manta: command %v args %v", c.Command, c.Args)
	}
	// configuration.enabled: KubeRay's Configuration file in a ConfigMap, mounted and passed with --config.
	objs = mustHelmTemplate(t, root, "manta", namespace, map[string]any{"configuration": map[string]any{"enabled": true,
		"defaultPodLabels": map[string]string{"team": "ml"}, "headSidecarContainers": []map[string]string{{"name": "fluentbit", "image": "fluent/fluent-bit:1.9"}}},
		"reconcileConcurrency": 3})
	d, a := op(objs, "manta-operator")
	cm := typed[corev1.ConfigMap](t, objs, "ConfigMap", "manta-operator-config")
	var conf map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &conf); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	if a["--config"] != "/etc/kuberay/config.yaml" || conf["kind"] != "Configuration" || conf["apiVersion"] != "config.ray.io/v1alpha1" ||
		conf["reconcileConcurrency"] != float64(3) || !equalJSON(conf["defaultPodLabels"], map[string]string{"team": "ml"}) ||
		!equalJSON(conf["headSidecarContainers"], []map[string]string{{"image": "fluent/fluent-bit:1.9", "name": "fluentbit"}}) {
		t.Errorf("configuration.enabled: --config=%q, config.yaml %v", a["--config"], conf)
	}
	if !slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.ConfigMap != nil && v.ConfigMap.Name == "manta-operator-config"
	}) {
		t.Error("configuration.enabled: the ConfigMap is not mounted")
	}
}

// checkKubeRayRefusals: what the chart cannot honour, or two values that contradict each other, fail the install
// with a message naming the values.
func checkKubeRayRefusals(t *testing.T, root string) {
	for name, c := range map[string]struct {
		values map[string]any
		want   []string
	}{
		"unknown command":     {map[string]any{"operatorCommand": "/usr/local/bin/kuberay"}, []string{"schema", "operatorCommand"}},
		"unknown gate":        {map[string]any{"featureGates": []map[string]any{{"name": "NoSuchGate", "enabled": true}}}, []string{"schema", "featureGates"}},
		"gate without value":  {map[string]any{"featureGates": []map[string]any{{"name": "RayCronJob"}}}, []string{"schema", "enabled"}},
		"unknown scheduler":   {map[string]any{"batchScheduler": map[string]any{"name": "default"}}, []string{"schema", "batchScheduler"}},
		"bad encoder":         {map[string]any{"logging": map[string]any{"stdoutEncoder": "text"}}, []string{"schema", "stdoutEncoder"}},
		"unknown KubeRay key": {map[string]any{"kubeClient": map[string]any{"timeout": 5}}, []string{"schema", "timeout"}},
		"replicas disagree": {map[string]any{"replicas": 2, "operator": map[string]any{"replicas": 3}},
			[]string{"replicas (2)", "operator.replicas (3)", "disagree"}},
		"leader election disagrees": {map[string]any{"leaderElectionEnabled": false, "operator": map[string]any{"leaderElection": true}},
			[]string{"leaderElectionEnabled", "operator.leaderElection"}},
		"qps disagrees": {map[string]any{"kubeClient": map[string]any{"qps": 50}, "operator": map[string]any{"qps": 100}},
			[]string{"kubeClient.qps", "operator.qps"}},
		"scheduler disagrees": {map[string]any{"batchScheduler": map[string]any{"name": "yunikorn"}, "operator": map[string]any{"batchScheduler": "volcano"}},
			[]string{"batchScheduler.name", "operator.batchScheduler"}},
		"watch disagrees": {map[string]any{"watchNamespace": []string{"a"}, "watchNamespaces": []string{"b"}},
			[]string{"watchNamespace", "watchNamespaces"}},
		"resources disagree": {map[string]any{"resources": map[string]any{"limits": map[string]string{"cpu": "1"}}, "operator": map[string]any{"resources": map[string]any{"limits": map[string]string{"cpu": "3"}}}},
			[]string{"resources", "operator.resources", "disagree"}},
		"pod label disagrees": {map[string]any{"labels": map[string]string{"team": "a"}, "operator": map[string]any{"podLabels": map[string]string{"team": "b"}}},
			[]string{"labels", "operator.podLabels", "team"}},
		"chart's own label":  {map[string]any{"labels": map[string]string{"app.kubernetes.io/instance": "x"}}, []string{"app.kubernetes.io/instance", "set by the chart"}},
		"scheduler twice":    {map[string]any{"batchScheduler": map[string]any{"enabled": true, "name": "yunikorn"}}, []string{"batchScheduler.enabled", "batchScheduler.name"}},
		"env cluster domain": {map[string]any{"env": []map[string]string{{"name": "CLUSTER_DOMAIN", "value": "a.local"}}, "operator": map[string]any{"clusterDomain": "b.local"}}, []string{"env CLUSTER_DOMAIN", "operator.clusterDomain"}},
		"env GOMAXPROCS":     {map[string]any{"env": []map[string]string{{"name": "GOMAXPROCS", "value": "2"}}, "operator": map[string]any{"adaptiveProcs": true}}, []string{"GOMAXPROCS", "operator.adaptiveProcs"}},
		"config without file": {map[string]any{"configuration": map[string]any{"defaultPodLabels": map[string]string{"a": "b"}}},
			[]string{"configuration.defaultPodLabels", "configuration.enabled"}},
		"log file without dir": {map[string]any{"logging": map[string]any{"fileName": "op.log"}}, []string{"logging.baseDir", "logging.fileName"}},
	} {
		_, err := helmTemplate(t, root, "manta", namespace, c.values)
		if err == nil {
			t.Errorf("%s %v: helm template succeeded", name, c.values)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %v: error %q does not say %q", name, c.values, err, w)
			}
		}
	}
}

// checkManagerArgs: with operatorCommand /manager the container runs the binary Manta's image links there, with
// the operator's flags and no subcommand. The manta binary under that name must parse every one of them (it prints
// its help only after parsing all flags) and list each in its help.
func checkManagerArgs(t *testing.T, bin string, objs []*unstructured.Unstructured) {
	c := onlyContainer(t, typed[appsv1.Deployment](t, objs, "Deployment", kubeRayOp))
	if !slices.Equal(c.Command, []string{"/manager"}) {
		t.Fatalf("command %v, want /manager", c.Command)
	}
	manager := filepath.Join(t.TempDir(), "manager")
	if err := os.Symlink(bin, manager); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(manager, append(slices.Clone(c.Args), "--help")...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Fatalf("/manager %s --help: %v\n%s%s", strings.Join(c.Args, " "), err, stderr.String(), stdout.String())
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if m := flagRE.FindStringSubmatch(line); m != nil {
			listed[m[1]] = true
		}
	}
	for _, a := range c.Args {
		flag, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !listed[flag] {
			t.Errorf("argument %q is not a flag /manager lists:\n%s", a, stdout.String())
		}
	}
}

// installKubeRayValues applies the KubeRay-values rendering (strict field validation, no warnings, in a namespace
// enforcing the restricted Pod Security Standard), sees the operator pod run under the named ServiceAccount, and
// that ServiceAccount hold its permissions in the watched namespaces.
func installKubeRayValues(t *testing.T, ctx context.Context, cfg *rest.Config, kc kubernetes.Interface, ns *unstructured.Unstructured, objs []*unstructured.Unstructured) {
	// The file's priorityClassName, as the platform would have it.
	if _, err := kc.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: "ray-platform-critical"}, Value: 1000000}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applyAll(t, cfg, append([]*unstructured.Unstructured{ns}, objs...))
	waitScheduled(t, ctx, kc, kubeRayNS, kubeRayRelease)
	pods, err := kc.CoreV1().Pods(kubeRayNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + kubeRayRelease + ",app.kubernetes.io/component=operator"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.ServiceAccountName != "kuberay-operator" || p.Spec.PriorityClassName != "ray-platform-critical" || p.Spec.Priority == nil || *p.Spec.Priority != 1000000 {
			t.Errorf("pod %s: ServiceAccount %s, priority class %s", p.Name, p.Spec.ServiceAccountName, p.Spec.PriorityClassName)
		}
	}
	const user = "system:serviceaccount:" + kubeRayNS + ":kuberay-operator"
	for _, wns := range []string{"team-a", "team-b"} {
		testutil.WaitRBAC(t, ctx, kc, user, wns, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}})
		testutil.WaitRBAC(t, ctx, kc, user, wns, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services/proxy"}, Verbs: []string{"get"}})
	}
	testutil.WaitRBAC(t, ctx, kc, user, kubeRayNS, rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"update"}})
	if allowed(t, ctx, kc, user, "other", "", "pods", "create") {
		t.Errorf("%s may create pods in namespace other, which it does not watch", user)
	}
}

// checkKubeRayConfigFile: with configuration.enabled the operator gets KubeRay's Configuration file and only the
// flags the file does not carry (it refuses the others beside --config); the file, read and applied by the
// operator's own code, gives the settings of testdata/kuberay-values.yaml and the Ray pods' defaults.
func checkKubeRayConfigFile(t *testing.T, objs []*unstructured.Unstructured) {
	d := typed[appsv1.Deployment](t, objs, "Deployment", kubeRayOp)
	c := onlyContainer(t, d)
	args := flagValues(c.Args)
	if args["--config"] != "/etc/kuberay/config.yaml" {
		t.Errorf("--config=%q", args["--config"])
	}
	changed := func(flag string) bool { _, ok := args["--"+flag]; return ok }
	cm := typed[corev1.ConfigMap](t, objs, "ConfigMap", kubeRayOp+"-config")
	conf, err := operator.ReadKubeRayConfig([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("the operator cannot read config.yaml: %v\n%s", err, cm.Data["config.yaml"])
	}
	var env string
	for _, e := range c.Env {
		if e.Name == operator.EnvDeleteRayJobAfterJobFinishes {
			env = e.Value
		}
	}
	var o operator.Options
	if err := operator.ApplyKubeRayConfig(conf, &o, changed, env); err != nil {
		t.Fatalf("the operator refuses config.yaml with args %v: %v", c.Args, err)
	}
	if o.QPS != 50 || o.Burst != 100 || !o.LeaderElection || o.LeaderElectionNS != kubeRayNS || o.HealthProbeAddr != ":8082" ||
		o.MetricsAddr != ":8080" || o.BatchScheduler != "yunikorn" || !slices.Equal(o.WatchNamespaces, []string{"team-a", "team-b"}) ||
		o.ReconcileConcurrency != 4 || !o.UseKubernetesProxy || o.NoKubeRayMetrics {
		t.Errorf("settings from config.yaml: %+v", o)
	}
	if conf.LogStdoutEncoder != "console" || conf.LogFileEncoder != "json" || conf.LogFile != "/var/log/kuberay/kuberay-operator.log" {
		t.Errorf("log settings in config.yaml: stdout %q, file %q (%q)", conf.LogStdoutEncoder, conf.LogFile, conf.LogFileEncoder)
	}
	sidecar := []corev1.Container{{Name: "fluentbit", Image: "fluent/fluent-bit:1.9"}}
	want := &clusterbuild.PodDefaults{HeadSidecars: sidecar, WorkerSidecars: sidecar,
		Env:         []corev1.EnvVar{{Name: "RAY_enable_open_telemetry", Value: "true"}},
		Annotations: map[string]string{"prometheus.io/scrape": "true"}, Labels: map[string]string{"team": "ml-platform"}}
	if !equalJSON(o.PodDefaults, want) {
		t.Errorf("Ray pod defaults from config.yaml %+v, want %+v", o.PodDefaults, want)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/etc/kuberay" && m.ReadOnly }) ||
		!slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil && v.ConfigMap.Name == cm.Name }) {
		t.Errorf("config.yaml is not mounted at /etc/kuberay: mounts %v", c.VolumeMounts)
	}
	// What stays a flag is unchanged from the flags rendering.
	for f, v := range map[string]string{"--feature-gates": "RayClusterStatusConditions=true,RayJobDeletionPolicy=true,RayMultiHostIndexing=true," +
		"RayServiceIncrementalUpgrade=true,RayCronJob=true,RayClusterMTLS=false,RayClusterNetworkPolicy=false,RayClusterHistoryServer=false",
		"--cluster-domain": "corp.local", "--gcs-ft-redis-cleanup": "false"} {
		if args[f] != v {
			t.Errorf("%s=%q, want %q", f, args[f], v)
		}
	}
}

// checkFeatureGateValues: for every gate of KubeRay v1.7.0 (the schema's list) and both values, the chart refuses
// the value exactly when the operator would refuse it at start (features.Parse), so a gate Manta cannot switch
// fails the install with the reason instead of a pod that does not start.
func checkFeatureGateValues(t *testing.T, root string) {
	if len(features.Names()) != 11 {
		t.Errorf("Manta knows %d feature gates, KubeRay v1.7.0 has 11: update the schema's featureGates names", len(features.Names()))
	}
	for _, name := range features.Names() {
		for _, on := range []bool{true, false} {
			_, parseErr := features.Parse(fmt.Sprintf("%s=%t", name, on))
			_, chartErr := helmTemplate(t, root, "manta", namespace, map[string]any{"featureGates": []map[string]any{{"name": name, "enabled": on}}})
			switch {
			case parseErr == nil && chartErr != nil:
				t.Errorf("featureGates %s=%t: the operator accepts it, the chart refuses it: %v", name, on, chartErr)
			case parseErr != nil && chartErr == nil:
				t.Errorf("featureGates %s=%t: the operator refuses it (%v), the chart renders it", name, on, parseErr)
			case chartErr != nil && !strings.Contains(chartErr.Error(), name+"="+fmt.Sprint(on)+" is not possible in Manta"):
				t.Errorf("featureGates %s=%t: chart error %v does not name the gate", name, on, chartErr)
			}
		}
	}
}
