package integration

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/sys/liveproc"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestDevClusterSmoke checks that the simulated cluster behaves like a cluster: fake nodes are Ready, a
// Deployment's pods are scheduled and become Running/Ready, a Job completes, and deleting an owner
// garbage-collects its dependents. Then Stop leaves no process and no directory behind.
func TestDevClusterSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const nodes = 5
	c, err := devcluster.Start(ctx, devcluster.Options{Nodes: nodes, NodeCPU: "8", NodeMemory: "32Gi", NodeMaxPods: 50, Logf: t.Logf})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	cs := kubernetes.NewForConfigOrDie(c.RESTConfig())

	// The garbage collector reads the API's resources when kube-controller-manager starts and then every 30 s: a
	// controller manager started before the CRDs would leave a deleted RayCluster's pods in place for up to that
	// long. The order is read from the API server's own: resourceVersions are etcd revisions, and this cluster has
	// one etcd, so the controller manager's first writes (each namespace's default ServiceAccount, which nothing
	// writes again) carry higher ones than the CRDs' last writes (their Established condition) when it started after.
	t.Run("controller manager started after the CRDs", func(t *testing.T) {
		crds, err := apiextensionsclient.NewForConfigOrDie(c.RESTConfig()).ApiextensionsV1().CustomResourceDefinitions().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var lastCRD uint64
		for _, crd := range crds.Items {
			lastCRD = max(lastCRD, revision(t, crd.ResourceVersion))
		}
		var sa *corev1.ServiceAccount
		waitFor(t, "kube-system's default service account", func() bool {
			sa, err = cs.CoreV1().ServiceAccounts("kube-system").Get(ctx, "default", metav1.GetOptions{})
			return err == nil
		})
		if len(crds.Items) == 0 || revision(t, sa.ResourceVersion) < lastCRD {
			t.Fatalf("kube-system's default ServiceAccount written at revision %s, before the last of %d CRDs (%d)", sa.ResourceVersion, len(crds.Items), lastCRD)
		}
	})

	t.Run("nodes ready with the asked shape", func(t *testing.T) {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != nodes {
			t.Fatalf("got %d nodes, want %d", len(list.Items), nodes)
		}
		for _, n := range list.Items {
			if got := n.Status.Allocatable.Cpu().String(); got != "8" {
				t.Errorf("node %s allocatable cpu = %s, want 8", n.Name, got)
			}
			if got := n.Status.Allocatable.Pods().Value(); got != 50 {
				t.Errorf("node %s allocatable pods = %d, want 50", n.Name, got)
			}
		}
	})

	// The batch schedulers' PodGroup CRDs come with the default CRDs, served once Start returns, so an operator
	// started with --batch-scheduler volcano or scheduler-plugins finds its kinds.
	t.Run("batch scheduler PodGroups served", func(t *testing.T) {
		for _, gv := range []string{"scheduling.volcano.sh/v1beta1", "scheduling.x-k8s.io/v1alpha1"} {
			res, err := cs.Discovery().ServerResourcesForGroupVersion(gv)
			if err != nil {
				t.Errorf("%s: %v", gv, err)
				continue
			}
			served := false
			for _, r := range res.APIResources {
				served = served || (r.Name == "podgroups" && r.Kind == "PodGroup" && r.Namespaced)
			}
			if !served {
				t.Errorf("%s serves no namespaced podgroups: %v", gv, res.APIResources)
			}
		}
	})
	t.Run("Gateway API served", func(t *testing.T) { testGatewayAPIServed(t, ctx, c) })

	ns := "smoke"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The ServiceAccount admission plugin needs the namespace's default ServiceAccount.
	waitFor(t, "default service account", func() bool {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})

	t.Run("deployment pods running and ready", func(t *testing.T) {
		labels := map[string]string{"app": "web"}
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](4),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
				},
			},
		}
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "4 pods Running and Ready on nodes", func() bool {
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil || len(pods.Items) != 4 {
				return false
			}
			for _, p := range pods.Items {
				if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning || !testutil.PodReady(&p) || p.Status.PodIP == "" {
					return false
				}
			}
			return true
		})
		waitFor(t, "deployment available", func() bool {
			d, err := cs.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			return err == nil && d.Status.AvailableReplicas == 4
		})
	})

	t.Run("job completes", func(t *testing.T) {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: ns},
			Spec: batchv1.JobSpec{
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
				}},
			},
		}
		if _, err := cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "job succeeded", func() bool {
			j, err := cs.BatchV1().Jobs(ns).Get(ctx, "once", metav1.GetOptions{})
			return err == nil && j.Status.Succeeded == 1 && j.Status.CompletionTime != nil
		})
	})

	t.Run("deleting an owner garbage-collects dependents", func(t *testing.T) {
		owner, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: "dependent",
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
			}},
		}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.AppsV1().Deployments(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "dependent config map collected", func() bool {
			_, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "dependent", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
		waitFor(t, "deployment's replica set and pods collected", func() bool {
			rs, err1 := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
			pods, err2 := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			return err1 == nil && err2 == nil && len(rs.Items) == 0 && len(pods.Items) == 0
		})
	})

	t.Run("a pod turns Ready in one status write unless it asks for a step delay", func(t *testing.T) {
		// What each pod went through, as its watch events show it: the states that had an IP.
		watchPod := func(name string, annotations map[string]string) []corev1.PodStatus {
			t.Helper()
			w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
				Spec: corev1.PodSpec{
					InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
					Containers:     []corev1.Container{{Name: "main", Image: "nginx"}},
				}}
			if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			var withIP []corev1.PodStatus
			timeout := time.After(90 * time.Second)
			for {
				select {
				case ev, ok := <-w.ResultChan():
					if !ok {
						t.Fatalf("pod %s: watch closed before it was Ready", name)
					}
					p, isPod := ev.Object.(*corev1.Pod)
					if !isPod || p.Status.PodIP == "" {
						continue
					}
					withIP = append(withIP, p.Status)
					if testutil.PodReady(p) {
						return withIP
					}
				case <-timeout:
					t.Fatalf("pod %s not Ready in 90 s; states with an IP: %+v", name, withIP)
				}
			}
		}

		states := watchPod("at-once", nil)
		first := states[0]
		if len(states) != 1 || first.Phase != corev1.PodRunning || len(first.InitContainerStatuses) != 1 ||
			first.InitContainerStatuses[0].State.Terminated == nil || len(first.ContainerStatuses) != 1 ||
			first.ContainerStatuses[0].State.Running == nil {
			t.Fatalf("pod without delay annotations: states with an IP %+v, want one: Running and Ready, its init container terminated, its container running", states)
		}

		states = watchPod("stepwise", map[string]string{"pod-ready.stage.kwok.x-k8s.io/delay": "1s"})
		if len(states) < 3 || states[0].Phase != corev1.PodPending || len(states[0].InitContainerStatuses) != 1 ||
			states[0].InitContainerStatuses[0].State.Waiting == nil {
			t.Fatalf("pod asking for a pod-ready delay: states with an IP %+v, want Pending with its init container waiting, "+
				"then initialized, then Running and Ready", states)
		}
	})

	t.Run("stop leaves nothing behind", func(t *testing.T) {
		dir := c.Dir()
		var procs []liveproc.ID
		for _, pid := range c.PIDs() {
			if id, ok := liveproc.Of(pid); ok {
				procs = append(procs, id)
			}
		}
		if err := c.Stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}
		for _, id := range procs {
			if id.Exists() {
				t.Errorf("process %v still alive after Stop", id)
			}
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("dir %s still exists after Stop (err=%v)", dir, err)
		}
	})
}

// waitFor waits up to 90 s for cond.
// revision reads a resourceVersion as the etcd revision it is on this cluster.
func revision(t *testing.T, rv string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", rv, err)
	}
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 90*time.Second, what, func() (bool, string) { return cond(), "not yet" })
}
