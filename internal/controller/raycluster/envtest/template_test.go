package envtest

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/controller/raycluster"
	"github.com/manta-dev/manta/internal/testutil"
)

// With --watch-namespace the manager's cache sees only the watched namespaces; the default PodTemplate lives in the
// operator's own namespace, outside them. It is read directly, so the pods still get it (issue 11).
func TestDefaultTemplateOutsideWatchedNamespaces(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	e := testutil.NewEnv(cl)
	for _, ns := range []string{"operator", "watched"} {
		e.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	e.Create(t, &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "operator", Name: "defaults"},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"defaulted": "yes"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: clusterbuild.DefaultContainerName, Image: "placeholder"}}},
		},
	})
	mgr := testutil.NewManager(t, cfg, func(o *ctrl.Options) {
		o.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{"watched": {}}}
	})
	if err := raycluster.NewReconciler(mgr, raycluster.Options{DefaultPodTemplate: "operator/defaults"}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	testutil.RunManager(t, mgr)

	rc := testutil.MakeRayCluster("watched", "rc").Workers("small", 1).Obj()
	e.Create(t, rc)
	e.Eventually(t, "pods with the default template's label", func() (bool, string) {
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
