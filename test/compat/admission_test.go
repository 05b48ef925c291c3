package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/testutil"
)

var resources = map[string]string{"RayCluster": "rayclusters", "RayJob": "rayjobs", "RayService": "rayservices", "RayCronJob": "raycronjobs"}

// TestAdmission runs the envtest cases in one control plane: starting one takes seconds.
func TestAdmission(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	namespace := func(name string) string {
		t.Helper()
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
		return name
	}

	t.Run("KubeRaySamplesApply", func(t *testing.T) { testSamplesApply(t, dyn, namespace("samples")) })
	t.Run("RefusedAtCreate", func(t *testing.T) { testRefusedAtCreate(t, dyn, namespace("refused")) })
	t.Run("RefusedAtUpdate", func(t *testing.T) { testRefusedAtUpdate(t, dyn, namespace("updates")) })
	t.Run("Defaults", func(t *testing.T) { testDefaults(t, cl, dyn, namespace("defaults")) })
	t.Run("TypedRoundTrip", func(t *testing.T) { testTypedRoundTrip(t, cl, namespace("typed")) })
}

func resourceFor(t *testing.T, dyn dynamic.Interface, u *unstructured.Unstructured) dynamic.ResourceInterface {
	t.Helper()
	gvk := u.GroupVersionKind()
	res, ok := resources[gvk.Kind]
	if !ok || gvk.Group != rayv1.GroupVersion.Group {
		t.Fatalf("not a ray.io object: %s", gvk)
	}
	return dyn.Resource(schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: res}).Namespace(u.GetNamespace())
}

// applyDryRun server-side applies u with dry-run and strict field validation, as `kubectl apply --server-side
// --dry-run=server --validate=strict` does.
func applyDryRun(ctx context.Context, t *testing.T, dyn dynamic.Interface, u *unstructured.Unstructured) error {
	t.Helper()
	body, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	_, err = resourceFor(t, dyn, u).Patch(ctx, u.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
		DryRun:          []string{metav1.DryRunAll},
		FieldManager:    "compat-test",
		Force:           ptr.To(true),
		FieldValidation: metav1.FieldValidationStrict,
	})
	return err
}

func create(ctx context.Context, t *testing.T, dyn dynamic.Interface, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	t.Helper()
	return resourceFor(t, dyn, u).Create(ctx, u, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
}

// decodeAll reads the objects of a multi-document YAML stream.
func decodeAll(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func testSamplesApply(t *testing.T, dyn dynamic.Interface, ns string) {
	kuberay := testutil.MustKubeRaySampleFiles(t)
	// Manta's own samples too.
	own, err := filepath.Glob(filepath.Join(testutil.MustRepoRoot(t), "config", "samples", "*.yaml"))
	if err != nil || len(own) == 0 {
		t.Fatalf("no samples in config/samples: %v", err)
	}
	fromKubeRay := 0
	for i, file := range append(slices.Clone(kuberay), own...) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range decodeAll(t, data) {
			if u.GroupVersionKind().Group != rayv1.GroupVersion.Group {
				continue
			}
			t.Run(filepath.Base(file)+"/"+u.GetKind()+"/"+u.GetName()+u.GetGenerateName(), func(t *testing.T) {
				u.SetNamespace(ns)
				// `kubectl create` / client-side `kubectl apply`.
				if _, err := resourceFor(t, dyn, u).Create(t.Context(), u, metav1.CreateOptions{
					DryRun:          []string{metav1.DryRunAll},
					FieldValidation: metav1.FieldValidationStrict,
				}); err != nil {
					t.Errorf("create refused: %v", err)
				}
				// `kubectl apply --server-side`. It needs a name, and unlike create it does not drop explicit
				// nulls (a sample has "metadata:" with nothing under it), so KubeRay's CRDs refuse those objects
				// the same way; the test applies them without the nulls.
				applied := u.DeepCopy()
				if applied.GetName() == "" {
					applied.SetName(applied.GetGenerateName() + "applied")
				}
				dropNulls(applied.Object)
				if err := applyDryRun(t.Context(), t, dyn, applied); err != nil {
					t.Errorf("server-side apply refused: %v", err)
				}
			})
			if i < len(kuberay) {
				fromKubeRay++
			}
		}
	}
	// The samples of KubeRay v1.5.0 hold 67 ray.io objects (in 70 YAML files); finding fewer means the reading
	// went wrong.
	if fromKubeRay < 67 {
		t.Errorf("applied only %d ray.io objects from KubeRay's %d sample files", fromKubeRay, len(kuberay))
	}
}

// dropNulls removes the keys whose value is null, at any depth.
func dropNulls(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if e == nil {
				delete(v, k)
			} else {
				dropNulls(e)
			}
		}
	case []any:
		for _, e := range v {
			dropNulls(e)
		}
	}
}

const clusterSpecYAML = `
headGroupSpec:
  rayStartParams: {}
  template:
    metadata:
      labels: {app: head}
    spec:
      containers:
      - name: ray-head
        image: rayproject/ray:2.52.0
workerGroupSpecs:
- groupName: small
  replicas: 1
  minReplicas: 0
  maxReplicas: 2
  rayStartParams: {}
  template:
    spec:
      containers:
      - name: ray-worker
        image: rayproject/ray:2.52.0
`

func fromYAML(t *testing.T, s string) map[string]any {
	t.Helper()
	objs := decodeAll(t, []byte(s))
	if len(objs) != 1 {
		t.Fatalf("want one object in %q", s)
	}
	return objs[0].Object
}

func object(t *testing.T, kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(rayv1.GroupVersion.String())
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func rayCluster(t *testing.T, ns, name string) *unstructured.Unstructured {
	return object(t, "RayCluster", ns, name, fromYAML(t, clusterSpecYAML))
}

func rayJob(t *testing.T, ns, name string) *unstructured.Unstructured {
	return object(t, "RayJob", ns, name, map[string]any{
		"entrypoint":     "python -c 'print(1)'",
		"rayClusterSpec": fromYAML(t, clusterSpecYAML),
	})
}

func rayService(t *testing.T, ns, name string) *unstructured.Unstructured {
	return object(t, "RayService", ns, name, map[string]any{
		"serveConfigV2":    "applications: []\n",
		"rayClusterConfig": fromYAML(t, clusterSpecYAML),
	})
}

// field returns the map at a path of map keys and list indexes ("spec", "workerGroupSpecs", 0).
func field(t *testing.T, u *unstructured.Unstructured, path ...any) map[string]any {
	t.Helper()
	var cur any = u.Object
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m := cur.(map[string]any)
			if _, ok := m[k]; !ok {
				m[k] = map[string]any{}
			}
			cur = m[k]
		case int:
			cur = cur.([]any)[k]
		}
	}
	return cur.(map[string]any)
}

type badCase struct {
	name string
	obj  func(t *testing.T, ns string) *unstructured.Unstructured
	// want are substrings of the error: the field path and the message.
	want []string
}

func testRefusedAtCreate(t *testing.T, dyn dynamic.Interface, ns string) {
	worker0 := []any{"spec", "workerGroupSpecs", 0}
	cases := []badCase{
		{
			name: "RayCluster minReplicas greater than maxReplicas",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "min-gt-max")
				w := field(t, u, worker0...)
				w["minReplicas"], w["maxReplicas"] = int64(3), int64(1)
				return u
			},
			want: []string{"spec.workerGroupSpecs[0].minReplicas", "minReplicas must be less than or equal to maxReplicas"},
		},
		{
			name: "RayCluster negative replicas",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "negative-replicas")
				field(t, u, worker0...)["replicas"] = int64(-1)
				return u
			},
			want: []string{"spec.workerGroupSpecs[0].replicas", "greater than or equal to 0"},
		},
		{
			name: "RayCluster negative minReplicas",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "negative-min")
				field(t, u, worker0...)["minReplicas"] = int64(-2)
				return u
			},
			want: []string{"spec.workerGroupSpecs[0].minReplicas", "greater than or equal to 0"},
		},
		{
			name: "RayCluster negative maxReplicas",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "negative-max")
				w := field(t, u, worker0...)
				w["minReplicas"], w["maxReplicas"] = int64(0), int64(-1)
				return u
			},
			want: []string{"spec.workerGroupSpecs[0].maxReplicas", "greater than or equal to 0"},
		},
		{
			name: "RayCluster duplicate worker group names",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "duplicate-groups")
				groups := u.Object["spec"].(map[string]any)["workerGroupSpecs"].([]any)
				second := field(t, u, worker0...)
				u.Object["spec"].(map[string]any)["workerGroupSpecs"] = append(groups, runtimeDeepCopy(second))
				return u
			},
			want: []string{"spec.workerGroupSpecs[1]", "Duplicate value", `"groupName":"small"`},
		},
		{
			name: "RayCluster managedBy not a known controller",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "managed-by-other")
				u.Object["spec"].(map[string]any)["managedBy"] = "example.com/other"
				return u
			},
			want: []string{"spec.managedBy", "the managedBy field value must be either 'ray.io/kuberay-operator' or 'kueue.x-k8s.io/multikueue'"},
		},
		{
			name: "RayCluster without headGroupSpec",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "no-head")
				delete(u.Object["spec"].(map[string]any), "headGroupSpec")
				return u
			},
			want: []string{"spec.headGroupSpec", "Required value"},
		},
		{
			name: "RayCluster worker group without template",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "no-template")
				delete(field(t, u, worker0...), "template")
				return u
			},
			want: []string{"spec.workerGroupSpecs[0].template", "Required value"},
		},
		{
			name: "RayCluster unknown field",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "unknown-field")
				field(t, u, worker0...)["replica"] = int64(1)
				return u
			},
			want: []string{`unknown field "spec.workerGroupSpecs[0].replica"`},
		},
		{
			name: "RayCluster invalid upgradeStrategy.type",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "bad-upgrade-type")
				field(t, u, "spec", "upgradeStrategy")["type"] = "Rolling"
				return u
			},
			want: []string{"spec.upgradeStrategy.type", `Unsupported value: "Rolling"`, `"Recreate"`, `"None"`},
		},
		{
			name: "RayCluster invalid autoscalerOptions.upscalingMode",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "bad-upscaling-mode")
				field(t, u, "spec", "autoscalerOptions")["upscalingMode"] = "Fast"
				return u
			},
			want: []string{"spec.autoscalerOptions.upscalingMode", `Unsupported value: "Fast"`},
		},
		{
			name: "RayCluster invalid autoscalerOptions.version",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "bad-autoscaler-version")
				field(t, u, "spec", "autoscalerOptions")["version"] = "v3"
				return u
			},
			want: []string{"spec.autoscalerOptions.version", `Unsupported value: "v3"`},
		},
		{
			name: "RayCluster invalid networkPolicy.mode",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "bad-network-policy")
				field(t, u, "spec", "networkPolicy")["mode"] = "AllowAll"
				return u
			},
			want: []string{"spec.networkPolicy.mode", `Unsupported value: "AllowAll"`},
		},
		{
			name: "RayCluster invalid gcsFaultToleranceOptions.backend",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "bad-gcs-backend")
				field(t, u, "spec", "gcsFaultToleranceOptions")["backend"] = "etcd"
				return u
			},
			want: []string{"spec.gcsFaultToleranceOptions.backend", `Unsupported value: "etcd"`},
		},
		{
			name: "RayCluster invalid authOptions.mode",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "bad-auth-mode")
				field(t, u, "spec", "authOptions")["mode"] = "password"
				return u
			},
			want: []string{"spec.authOptions.mode", `Unsupported value: "password"`},
		},
		{
			name: "RayCluster invalid ingressOptions.pathType",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "bad-path-type")
				field(t, u, "spec", "headGroupSpec", "ingressOptions")["pathType"] = "Regex"
				return u
			},
			want: []string{"spec.headGroupSpec.ingressOptions.pathType", `Unsupported value: "Regex"`},
		},
		{
			name: "RayJob with neither rayClusterSpec nor clusterSelector",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayJob(t, ns, "no-cluster")
				delete(u.Object["spec"].(map[string]any), "rayClusterSpec")
				return u
			},
			want: []string{"spec.rayClusterSpec or spec.clusterSelector must be set"},
		},
		{
			name: "RayJob with an empty clusterSelector",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayJob(t, ns, "empty-selector")
				spec := u.Object["spec"].(map[string]any)
				delete(spec, "rayClusterSpec")
				spec["clusterSelector"] = map[string]any{}
				return u
			},
			want: []string{"spec.rayClusterSpec or spec.clusterSelector must be set"},
		},
		{
			name: "RayJob with upgradeStrategy in rayClusterSpec",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayJob(t, ns, "job-upgrade-strategy")
				field(t, u, "spec", "rayClusterSpec", "upgradeStrategy")["type"] = "Recreate"
				return u
			},
			want: []string{"spec.rayClusterSpec.upgradeStrategy", "upgradeStrategy cannot be set on a RayCluster owned by a RayJob"},
		},
		{
			name: "RayJob minReplicas greater than maxReplicas in rayClusterSpec",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayJob(t, ns, "job-min-gt-max")
				w := field(t, u, "spec", "rayClusterSpec", "workerGroupSpecs", 0)
				w["minReplicas"], w["maxReplicas"] = int64(5), int64(4)
				return u
			},
			want: []string{"spec.rayClusterSpec.workerGroupSpecs[0].minReplicas", "minReplicas must be less than or equal to maxReplicas"},
		},
		{
			name: "RayJob invalid submissionMode",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayJob(t, ns, "bad-submission-mode")
				u.Object["spec"].(map[string]any)["submissionMode"] = "CronMode"
				return u
			},
			want: []string{"spec.submissionMode", `Unsupported value: "CronMode"`},
		},
		{
			name: "RayJob invalid deletion policy",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayJob(t, ns, "bad-deletion-policy")
				u.Object["spec"].(map[string]any)["deletionStrategy"] = map[string]any{
					"onSuccess": map[string]any{"policy": "DeleteEverything"},
					"onFailure": map[string]any{"policy": "DeleteNone"},
				}
				return u
			},
			want: []string{"spec.deletionStrategy.onSuccess.policy", `Unsupported value: "DeleteEverything"`},
		},
		{
			name: "RayJob deletionStrategy with only onSuccess (KubeRay's rule)",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayJob(t, ns, "half-deletion-strategy")
				u.Object["spec"].(map[string]any)["deletionStrategy"] = map[string]any{
					"onSuccess": map[string]any{"policy": "DeleteCluster"},
				}
				return u
			},
			want: []string{"spec.deletionStrategy", "deletionStrategy requires either BOTH onSuccess and onFailure"},
		},
		{
			name: "RayJob deletion rule with both jobStatus and jobDeploymentStatus (KubeRay's rule)",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayJob(t, ns, "double-condition")
				u.Object["spec"].(map[string]any)["deletionStrategy"] = map[string]any{
					"deletionRules": []any{map[string]any{
						"policy":    "DeleteCluster",
						"condition": map[string]any{"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Failed"},
					}},
				}
				return u
			},
			want: []string{"spec.deletionStrategy.deletionRules[0].condition", "JobStatus and JobDeploymentStatus cannot be used together"},
		},
		{
			name: "RayJob preRunningDeadlineSeconds zero",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayJob(t, ns, "zero-prerunning-deadline")
				u.Object["spec"].(map[string]any)["preRunningDeadlineSeconds"] = int64(0)
				return u
			},
			want: []string{"spec.preRunningDeadlineSeconds", "greater than or equal to 1"},
		},
		{
			name: "RayService with upgradeStrategy in rayClusterConfig",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayService(t, ns, "svc-upgrade-strategy")
				field(t, u, "spec", "rayClusterConfig", "upgradeStrategy")["type"] = "None"
				return u
			},
			want: []string{"spec.rayClusterConfig.upgradeStrategy", "upgradeStrategy cannot be set on a RayCluster owned by a RayService"},
		},
		{
			name: "RayService invalid upgradeStrategy.type",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayService(t, ns, "svc-bad-upgrade-type")
				field(t, u, "spec", "upgradeStrategy")["type"] = "BlueGreen"
				return u
			},
			want: []string{"spec.upgradeStrategy.type", `Unsupported value: "BlueGreen"`},
		},
		{
			name: "RayService negative rayClusterDeletionDelaySeconds",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayService(t, ns, "svc-negative-delay")
				u.Object["spec"].(map[string]any)["rayClusterDeletionDelaySeconds"] = int64(-1)
				return u
			},
			want: []string{"spec.rayClusterDeletionDelaySeconds", "greater than or equal to 0"},
		},
		{
			name: "RayService without rayClusterConfig",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayService(t, ns, "svc-no-cluster")
				delete(u.Object["spec"].(map[string]any), "rayClusterConfig")
				return u
			},
			want: []string{"spec.rayClusterConfig", "Required value"},
		},
		{
			name: "RayService duplicate worker group names",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayService(t, ns, "svc-duplicate-groups")
				spec := field(t, u, "spec", "rayClusterConfig")
				groups := spec["workerGroupSpecs"].([]any)
				spec["workerGroupSpecs"] = append(groups, runtimeDeepCopy(groups[0].(map[string]any)))
				return u
			},
			want: []string{"spec.rayClusterConfig.workerGroupSpecs[1]", "Duplicate value"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := create(t.Context(), t, dyn, tc.obj(t, ns))
			wantRefused(t, err, tc.want)
		})
	}
}

func runtimeDeepCopy(m map[string]any) map[string]any {
	return (&unstructured.Unstructured{Object: m}).DeepCopy().Object
}

func wantRefused(t *testing.T, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want an error with %q", want)
	}
	if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
		t.Errorf("error is not Invalid or BadRequest: %v", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not mention %q:\n%v", w, err)
		}
	}
}

func testRefusedAtUpdate(t *testing.T, dyn dynamic.Interface, ns string) {
	cases := []struct {
		name   string
		obj    func(t *testing.T, ns string) *unstructured.Unstructured
		update func(u *unstructured.Unstructured)
		want   []string
	}{
		{
			name: "RayCluster managedBy changed",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "managed-by-changed")
				u.Object["spec"].(map[string]any)["managedBy"] = rayv1.KubeRayController
				return u
			},
			update: func(u *unstructured.Unstructured) {
				u.Object["spec"].(map[string]any)["managedBy"] = rayv1.MultiKueueController
			},
			want: []string{"spec.managedBy", "the managedBy field is immutable"},
		},
		{
			name: "RayCluster managedBy set after create",
			obj:  func(t *testing.T, ns string) *unstructured.Unstructured { return rayCluster(t, ns, "managed-by-added") },
			update: func(u *unstructured.Unstructured) {
				u.Object["spec"].(map[string]any)["managedBy"] = rayv1.MultiKueueController
			},
			want: []string{"spec.managedBy", "the managedBy field is immutable"},
		},
		{
			name: "RayCluster managedBy removed",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "managed-by-removed")
				u.Object["spec"].(map[string]any)["managedBy"] = rayv1.MultiKueueController
				return u
			},
			update: func(u *unstructured.Unstructured) { delete(u.Object["spec"].(map[string]any), "managedBy") },
			want:   []string{"spec.managedBy", "the managedBy field is immutable"},
		},
		{
			name: "RayJob managedBy changed",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayJob(t, ns, "job-managed-by-changed")
				u.Object["spec"].(map[string]any)["managedBy"] = rayv1.MultiKueueController
				return u
			},
			update: func(u *unstructured.Unstructured) {
				u.Object["spec"].(map[string]any)["managedBy"] = rayv1.KubeRayController
			},
			want: []string{"spec.managedBy", "the managedBy field is immutable"},
		},
		{
			name: "RayService managedBy set after create",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				return rayService(t, ns, "svc-managed-by-added")
			},
			update: func(u *unstructured.Unstructured) {
				u.Object["spec"].(map[string]any)["managedBy"] = rayv1.KubeRayController
			},
			want: []string{"spec.managedBy", "the managedBy field is immutable"},
		},
		{
			name: "RayCluster gcsFaultToleranceOptions.backend changed (KubeRay's rule)",
			obj: func(t *testing.T, ns string) *unstructured.Unstructured {
				u := rayCluster(t, ns, "gcs-backend-changed")
				u.Object["spec"].(map[string]any)["gcsFaultToleranceOptions"] = map[string]any{"backend": "redis", "redisAddress": "redis:6379"}
				return u
			},
			update: func(u *unstructured.Unstructured) {
				u.Object["spec"].(map[string]any)["gcsFaultToleranceOptions"].(map[string]any)["backend"] = "rocksdb"
			},
			want: []string{"spec.gcsFaultToleranceOptions.backend", "gcsFaultToleranceOptions.backend is immutable"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			created, err := create(ctx, t, dyn, tc.obj(t, ns))
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			tc.update(created)
			_, err = resourceFor(t, dyn, created).Update(ctx, created, metav1.UpdateOptions{FieldValidation: metav1.FieldValidationStrict})
			wantRefused(t, err, tc.want)
		})
	}

	t.Run("RayCluster unchanged managedBy may be updated", func(t *testing.T) {
		ctx := t.Context()
		u := rayCluster(t, ns, "managed-by-kept")
		u.Object["spec"].(map[string]any)["managedBy"] = rayv1.KubeRayController
		created, err := create(ctx, t, dyn, u)
		if err != nil {
			t.Fatal(err)
		}
		created.Object["spec"].(map[string]any)["suspend"] = true
		if _, err := resourceFor(t, dyn, created).Update(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("update refused: %v", err)
		}
	})
}

func testDefaults(t *testing.T, cl client.Client, dyn dynamic.Interface, ns string) {
	ctx := t.Context()

	// A worker group with only the required fields, and a network policy without a mode.
	u := rayCluster(t, ns, "defaults")
	w := field(t, u, "spec", "workerGroupSpecs", 0)
	for _, k := range []string{"replicas", "minReplicas", "maxReplicas"} {
		delete(w, k)
	}
	u.Object["spec"].(map[string]any)["networkPolicy"] = map[string]any{}
	if _, err := create(ctx, t, dyn, u); err != nil {
		t.Fatal(err)
	}
	var rc rayv1.RayCluster
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "defaults"}, &rc); err != nil {
		t.Fatal(err)
	}
	g := rc.Spec.WorkerGroupSpecs[0]
	for name, got := range map[string]*int32{"replicas": g.Replicas, "minReplicas": g.MinReplicas, "maxReplicas": g.MaxReplicas, "priority": g.Priority} {
		want := map[string]int32{"replicas": 0, "minReplicas": 0, "maxReplicas": 2147483647, "priority": 0}[name]
		if got == nil || *got != want {
			t.Errorf("%s = %v, want default %d", name, got, want)
		}
	}
	if g.NumOfHosts != 1 {
		t.Errorf("numOfHosts = %d, want default 1", g.NumOfHosts)
	}
	if rc.Spec.NetworkPolicy == nil || rc.Spec.NetworkPolicy.Mode != rayv1.NetworkPolicyDenyAll {
		t.Errorf("networkPolicy = %+v, want mode DenyAll", rc.Spec.NetworkPolicy)
	}
	// Embedded object metadata is kept, not pruned.
	if got := rc.Spec.HeadGroupSpec.Template.Labels["app"]; got != "head" {
		t.Errorf("head template label app = %q, want it kept", got)
	}

	job := rayJob(t, ns, "job-defaults")
	job.Object["spec"].(map[string]any)["deletionStrategy"] = map[string]any{
		"deletionRules": []any{map[string]any{"policy": "DeleteCluster", "condition": map[string]any{"jobStatus": "SUCCEEDED"}}},
	}
	if _, err := create(ctx, t, dyn, job); err != nil {
		t.Fatal(err)
	}
	var rj rayv1.RayJob
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "job-defaults"}, &rj); err != nil {
		t.Fatal(err)
	}
	if rj.Spec.SubmissionMode != rayv1.K8sJobMode {
		t.Errorf("submissionMode = %q, want default %q", rj.Spec.SubmissionMode, rayv1.K8sJobMode)
	}
	if rj.Spec.BackoffLimit == nil || *rj.Spec.BackoffLimit != 0 {
		t.Errorf("backoffLimit = %v, want default 0", rj.Spec.BackoffLimit)
	}
	if rj.Spec.TTLSecondsAfterFinished != 0 {
		t.Errorf("ttlSecondsAfterFinished = %d, want default 0", rj.Spec.TTLSecondsAfterFinished)
	}
	if n := rj.Spec.RayClusterSpec.WorkerGroupSpecs[0].NumOfHosts; n != 1 {
		t.Errorf("rayClusterSpec numOfHosts = %d, want default 1", n)
	}

	svc := rayService(t, ns, "svc-defaults")
	svc.Object["spec"].(map[string]any)["upgradeStrategy"] = map[string]any{
		"type":                  "NewClusterWithIncrementalUpgrade",
		"clusterUpgradeOptions": map[string]any{"gatewayClassName": "istio", "stepSizePercent": int64(10), "intervalSeconds": int64(30)},
	}
	if _, err := create(ctx, t, dyn, svc); err != nil {
		t.Fatal(err)
	}
	var rs rayv1.RayService
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "svc-defaults"}, &rs); err != nil {
		t.Fatal(err)
	}
	if got := rs.Spec.UpgradeStrategy.ClusterUpgradeOptions.MaxSurgePercent; got == nil || *got != 100 {
		t.Errorf("maxSurgePercent = %v, want default 100", got)
	}
}

// Objects built with the Go types, as controllers and Kueue build them, are accepted and read back unchanged.
func testTypedRoundTrip(t *testing.T, cl client.Client, ns string) {
	ctx := t.Context()
	podTemplate := func(name string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "ml"}, Annotations: map[string]string{"a": "b"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "rayproject/ray:2.52.0"}}},
		}
	}
	spec := rayv1.RayClusterSpec{
		RayVersion:    "2.52.0",
		HeadGroupSpec: rayv1.HeadGroupSpec{RayStartParams: map[string]string{}, Template: podTemplate("ray-head")},
		// MinReplicas and MaxReplicas are nil: they are sent as null and defaulted.
		WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{GroupName: "g", Replicas: ptr.To[int32](1), Template: podTemplate("ray-worker")}},
	}
	rc := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "typed"}, Spec: spec}
	if err := cl.Create(ctx, rc, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
		t.Fatalf("create RayCluster: %v", err)
	}
	if g := rc.Spec.WorkerGroupSpecs[0]; g.MinReplicas == nil || *g.MinReplicas != 0 || g.MaxReplicas == nil || *g.MaxReplicas != 2147483647 {
		t.Errorf("nil minReplicas/maxReplicas not defaulted: %v %v", g.MinReplicas, g.MaxReplicas)
	}
	if rc.Spec.WorkerGroupSpecs[0].Template.Labels["team"] != "ml" || rc.Spec.HeadGroupSpec.Template.Annotations["a"] != "b" {
		t.Errorf("pod template metadata lost: %+v", rc.Spec.WorkerGroupSpecs[0].Template.ObjectMeta)
	}

	rj := &rayv1.RayJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "typed-job"},
		Spec: rayv1.RayJobSpec{
			Entrypoint:        "python main.py",
			RayClusterSpec:    spec.DeepCopy(),
			EntrypointNumCpus: 0.5,
			SubmissionMode:    rayv1.HTTPMode,
		},
	}
	if err := cl.Create(ctx, rj, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
		t.Fatalf("create RayJob: %v", err)
	}
	if rj.Spec.EntrypointNumCpus != 0.5 || rj.Spec.SubmissionMode != rayv1.HTTPMode {
		t.Errorf("RayJob spec changed on the way: %+v", rj.Spec)
	}

	// Status is written through the status subresource, as controllers do.
	rj.Status.JobStatus = rayv1.JobStatusRunning
	rj.Status.JobDeploymentStatus = rayv1.JobDeploymentStatusRunning
	rj.Status.RayClusterStatus.State = rayv1.Ready
	if err := cl.Status().Update(ctx, rj); err != nil {
		t.Fatalf("update RayJob status: %v", err)
	}
	var got rayv1.RayJob
	if err := cl.Get(ctx, client.ObjectKeyFromObject(rj), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.JobStatus != rayv1.JobStatusRunning || got.Status.RayClusterStatus.State != rayv1.Ready {
		t.Errorf("status not stored: %+v", got.Status)
	}

	rs := &rayv1.RayService{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "typed-svc"},
		Spec:       rayv1.RayServiceSpec{RayClusterSpec: *spec.DeepCopy(), ServeConfigV2: "applications: []\n"},
	}
	if err := cl.Create(ctx, rs, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
		t.Fatalf("create RayService: %v", err)
	}
}
