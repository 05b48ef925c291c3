package apiserver_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/apiserver/apiservertest"
)

// FuzzDecodeValidate feeds arbitrary bodies to the decoding, validation and conversion of every request model.
// Whatever comes in, the answer is either accepted or a 4xx that names a field; nothing panics and nothing is a
// 5xx. The seed corpus runs in go test.
func FuzzDecodeValidate(f *testing.F) {
	seeds := []any{
		apiservertest.Template("ns", "small"),
		apiservertest.Cluster("ns", "demo"),
		apiservertest.Job("ns", "train"),
		apiservertest.Service("ns", "serve"),
		apiserver.RayJobSubmission{Entrypoint: "echo", EntrypointResources: map[string]string{"a": "1"}},
		apiserver.ImagePullJob{Name: "p", Namespace: "ns", Image: "busybox", NodeNames: []string{"n"}},
	}
	for i, s := range seeds {
		raw, _ := json.Marshal(s)
		f.Add(uint8(i), raw)
		f.Add(uint8(i)|0x80, raw)
	}
	for _, raw := range []string{``, `null`, `[]`, `{"name":1}`, `{"clusterSpec":{"headGroupSpec":null}}`,
		`{"clusterSpec":{"workerGroupSpec":[null,{}]}}`, `{"environment":"DEV","envs":{"valuesFrom":{"A":{"source":7}}}}`,
		`{"cpu":1e400}`, `{"memory":-0}`, `{"a":` + "\"\\ud800\"" + `}`, `{"volumes":[{"volumeType":"EPHEMERAL","storage":"1Gi"}]}`} {
		for i := range seeds {
			f.Add(uint8(i), []byte(raw))
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, raw []byte) {
		// The high bit picks the field validation mode, so both Warn and Strict are fuzzed.
		mode := apiserver.FieldValidationWarn
		if kind&0x80 != 0 {
			mode = apiserver.FieldValidationStrict
		}
		decodeJSON := func(raw []byte, out any) *apiserver.APIError {
			_, e := apiserver.DecodeJSON(raw, out, mode)
			return e
		}
		var e *apiserver.APIError
		switch kind % 6 {
		case 0:
			var v apiserver.ComputeTemplate
			if e = decodeJSON(raw, &v); e == nil {
				if vs := apiserver.ValidateComputeTemplate(&v, "ns"); len(vs) > 0 {
					e = apiserver.Invalid(vs...)
				} else {
					roundTrip(t, raw, v, func(v apiserver.ComputeTemplate) apiserver.ComputeTemplate {
						return apiserver.TemplateFromConfigMap(apiserver.TemplateToConfigMap(&v))
					})
				}
			}
		case 1:
			var v apiserver.Cluster
			if e = decodeJSON(raw, &v); e == nil {
				if vs := apiserver.ValidateCluster(&v, "ns"); len(vs) > 0 {
					e = apiserver.Invalid(vs...)
				} else {
					roundTrip(t, raw, v, func(v apiserver.Cluster) apiserver.Cluster {
						return apiserver.ClusterFromRay(apiserver.ClusterToRay(&v, fakeTemplates(v.ClusterSpec)))
					})
				}
			}
		case 2:
			var v apiserver.RayJob
			if e = decodeJSON(raw, &v); e == nil {
				if vs := apiserver.ValidateJob(&v, "ns"); len(vs) > 0 {
					e = apiserver.Invalid(vs...)
				} else {
					roundTrip(t, raw, v, func(v apiserver.RayJob) apiserver.RayJob {
						return apiserver.JobFromRay(apiserver.JobToRay(&v, fakeTemplates(v.ClusterSpec)))
					})
				}
			}
		case 3:
			var v apiserver.RayService
			if e = decodeJSON(raw, &v); e == nil {
				if vs := apiserver.ValidateService(&v, "ns", ""); len(vs) > 0 {
					e = apiserver.Invalid(vs...)
				} else {
					roundTrip(t, raw, v, func(v apiserver.RayService) apiserver.RayService {
						return apiserver.ServiceFromRay(apiserver.ServiceToRay(&v, fakeTemplates(v.ClusterSpec)))
					})
				}
			}
		case 4:
			var v apiserver.RayJobSubmission
			if e = decodeJSON(raw, &v); e == nil {
				if vs := apiserver.ValidateSubmission(&v); len(vs) > 0 {
					e = apiserver.Invalid(vs...)
				}
			}
		case 5:
			var v apiserver.ImagePullJob
			if e = decodeJSON(raw, &v); e == nil {
				if vs := apiserver.ValidateImagePullJob(&v, "ns"); len(vs) > 0 {
					e = apiserver.Invalid(vs...)
				} else {
					roundTrip(t, raw, v, func(v apiserver.ImagePullJob) apiserver.ImagePullJob {
						return apiserver.ImagePullJobFromK8s(apiserver.ImagePullJobToK8s(&v))
					})
				}
			}
		}
		if e == nil {
			return
		}
		if e.HTTPStatus() < 400 || e.HTTPStatus() >= 500 {
			t.Fatalf("status %d for %q: %s", e.HTTPStatus(), raw, e.Message)
		}
		if len(e.Violations()) == 0 || e.Message == "" {
			t.Fatalf("error without a named field for %q: %+v", raw, e.Status)
		}
	})
}

// roundTrip asserts that converting a valid model to its Kubernetes object and back is stable: what one round trip
// gives, a second gives again, equal field for field. (The first may normalise: defaults filled in, a compute
// template's resources written out.)
func roundTrip[T any](t *testing.T, raw []byte, v T, rt func(T) T) {
	t.Helper()
	once := rt(v)
	if diff := cmp.Diff(once, rt(once)); diff != "" {
		t.Fatalf("round trip of %q is not stable (-once +twice):\n%s", raw, diff)
	}
}

// fakeTemplates stands in for the compute templates a valid spec names (the handler reads them from Kubernetes).
func fakeTemplates(s *apiserver.ClusterSpec) apiserver.Templates {
	ts := apiserver.Templates{}
	for _, ref := range apiserver.TemplateNames(s, "clusterSpec") {
		ts[ref.Description] = &apiserver.ComputeTemplate{Name: ref.Description, CPU: 1, Memory: 1, GPU: 1, ExtendedResources: map[string]uint32{"x.io/y": 1},
			Tolerations: []apiserver.PodToleration{{Key: "k", Operator: "Exists", Effect: "NoSchedule"}}}
	}
	return ts
}
