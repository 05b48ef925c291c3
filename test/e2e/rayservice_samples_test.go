package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/rayservice"
	"github.com/manta-dev/manta/internal/testutil"
)

// wantServiceUnsupported is, per RayService sample, exactly the fields Manta must report as unsupported (the
// others report none). Written by hand from reading the samples of the pinned KubeRay (v1.5.0).
var wantServiceUnsupported = map[string]string{}

// TestRayServiceSamples applies every KubeRay RayService sample unchanged (strict field validation), each in its
// own namespace, all at once, and waits until the RayService's cluster is ready with all pods Running and Ready on
// the dev cluster, reporting exactly the unsupported fields of wantServiceUnsupported. There is no Ray in the pods
// of the dev cluster, so the services stop there: Ready stays False (Initializing) and no traffic is switched.
func TestRayServiceSamples(t *testing.T) {
	_, cl := devCluster(t)
	// KubeRay v1.5.0 has 13 RayService samples.
	files := testutil.MustKubeRaySampleFilesNamed(t, "ray-service.", 13)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() {
			start := time.Now()
			if msg := runServiceSample(ctx, cl, i, f); msg != "" {
				t.Errorf("%s: %s", filepath.Base(f), msg)
				return
			}
			t.Logf("cluster ready: %s in %s", filepath.Base(f), time.Since(start).Round(time.Millisecond))
		})
	}
	wg.Wait()
}

func runServiceSample(ctx context.Context, cl client.Client, i int, file string) string {
	ns := strings.Trim(dnsUnsafe.ReplaceAllString(strings.ToLower(fmt.Sprintf("rs%02d-%s", i, strings.TrimSuffix(filepath.Base(file), ".yaml"))), "-"), "-")
	if len(ns) > 63 {
		ns = strings.TrimRight(ns[:63], "-")
	}
	if err := testutil.CreateNamespace(ctx, cl, ns); err != nil {
		return "create namespace: " + err.Error()
	}
	raw, err := testutil.ReadKubeRaySample(file)
	if err != nil {
		return err.Error()
	}
	var services []string
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return err.Error()
		}
		if len(u.Object) == 0 {
			continue
		}
		u.SetNamespace(ns)
		if u.GetKind() == "RayService" {
			svc := &rayv1.RayService{}
			if err := runtimeConvert(u, svc); err != nil {
				return err.Error()
			}
			// Service accounts the templates name must exist, or admission rejects the pods.
			rc := &rayv1.RayCluster{Spec: svc.Spec.RayClusterSpec}
			for _, tmpl := range templates(rc) {
				if sa := tmpl.Spec.ServiceAccountName; sa != "" {
					if err := cl.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}); err != nil && !strings.Contains(err.Error(), "already exists") {
						return "create service account: " + err.Error()
					}
				}
			}
			services = append(services, u.GetName())
		}
		if err := cl.Create(ctx, u, client.FieldValidation("Strict")); err != nil {
			return fmt.Sprintf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	if len(services) == 0 {
		return "no RayService in the sample"
	}
	for _, name := range services {
		var last string
		for {
			rs := &rayv1.RayService{}
			if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, rs); err != nil {
				return err.Error()
			}
			unsupported := ""
			if c := meta.FindStatusCondition(rs.Status.Conditions, rayservice.ConditionUnsupportedFeature); c != nil && c.Status == metav1.ConditionTrue {
				unsupported = c.Message
			}
			if want := wantServiceUnsupported[filepath.Base(file)]; unsupported != want && rs.Status.ObservedGeneration > 0 {
				return fmt.Sprintf("reports unsupported %q, want %q", unsupported, want)
			}
			if c := meta.FindStatusCondition(rs.Status.Conditions, string(rayv1.RayServiceReady)); c != nil && c.Reason == string(rayv1.RayServiceValidationFailed) {
				return "refused: " + c.Message
			}
			if ready, msg := serviceClusterReady(ctx, cl, rs); ready {
				break
			} else {
				last = msg
			}
			select {
			case <-ctx.Done():
				return "timed out: " + last
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return ""
}

// serviceClusterReady says whether the RayService's pending (or active) cluster is ready with all its pods.
func serviceClusterReady(ctx context.Context, cl client.Client, rs *rayv1.RayService) (bool, string) {
	name := rs.Status.PendingServiceStatus.RayClusterName
	if name == "" {
		name = rs.Status.ActiveServiceStatus.RayClusterName
	}
	if name == "" {
		return false, "no cluster named in the status"
	}
	rc := &rayv1.RayCluster{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: name}, rc); err != nil {
		return false, err.Error()
	}
	if rc.Labels[rayv1.LabelOriginCRD] != "RayService" || !metav1.IsControlledBy(rc, rs) {
		return false, fmt.Sprintf("cluster %s labels %v owners %v", name, rc.Labels, rc.OwnerReferences)
	}
	pods := &corev1.PodList{}
	if err := cl.List(ctx, pods, client.InNamespace(rs.Namespace), client.MatchingLabels{rayv1.LabelCluster: name}); err != nil {
		return false, err.Error()
	}
	allReady := len(pods.Items) == int(rc.Status.DesiredWorkerReplicas)+1
	for _, p := range pods.Items {
		allReady = allReady && podReady(&p)
	}
	return rc.Status.State == rayv1.Ready && allReady, fmt.Sprintf("cluster %s state %q, %d pods (%d desired workers)", name, rc.Status.State, len(pods.Items), rc.Status.DesiredWorkerReplicas)
}

func runtimeConvert(u *unstructured.Unstructured, out any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out)
}
