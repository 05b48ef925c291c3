package envtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// With --watch-namespace the manager's cache sees only the watched namespaces; the default PodTemplate lives in the
// operator's own namespace, outside them. It is read directly, so the pods still get it (issue 11).
func TestDefaultTemplateOutsideWatchedNamespaces(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, ns := range []string{"operator", "watched"} {
		mustCreate(t, cl, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	mustCreate(t, cl, &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "operator", Name: "defaults"},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"defaulted": "yes"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: clusterbuild.DefaultContainerName, Image: "placeholder"}}},
		},
	})
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{"watched": {}}},
		// TestController runs a controller of the same name in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := raycluster.NewReconciler(mgr, raycluster.Options{DefaultPodTemplate: "operator/defaults"}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })

	rc := testutil.MakeRayCluster("watched", "rc").Workers("small", 1).Obj()
	mustCreate(t, cl, rc)
	testutil.Eventually(t, 2*time.Minute, "pods with the default template's label", func() (bool, string) {
		pods := &corev1.PodList{}
		if err := cl.List(context.Background(), pods, client.InNamespace("watched")); err != nil {
			return false, err.Error()
		}
		n := 0
		for _, p := range pods.Items {
			if p.Labels["defaulted"] == "yes" {
				n++
			}
		}
		return len(pods.Items) == 2 && n == 2, fmt.Sprintf("%d pods, %d with the label", len(pods.Items), n)
	})
}
