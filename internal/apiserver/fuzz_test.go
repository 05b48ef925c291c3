package apiserver

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecodeValidate feeds arbitrary bodies to the decoding, validation and conversion of every request model.
// Whatever comes in, the answer is either accepted or a 4xx that names a field; nothing panics and nothing is a
// 5xx. The seed corpus runs in go test.
func FuzzDecodeValidate(f *testing.F) {
	seeds := []any{
		template("ns", "small"),
		cluster("ns", "demo"),
		job("ns", "train"),
		service("ns", "serve"),
		RayJobSubmission{Entrypoint: "echo", EntrypointResources: map[string]string{"a": "1"}},
		ImagePullJob{Name: "p", Namespace: "ns", Image: "busybox", NodeNames: []string{"n"}},
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
		mode := FieldValidationWarn
		if kind&0x80 != 0 {
			mode = FieldValidationStrict
		}
		decodeJSON := func(raw []byte, out any) *apiError {
			_, e := decodeJSON(raw, out, mode)
			return e
		}
		var e *apiError
		switch kind % 6 {
		case 0:
			var v ComputeTemplate
			if e = decodeJSON(raw, &v); e == nil {
				if vs := validateComputeTemplate(&v, "ns"); len(vs) > 0 {
					e = invalid(vs...)
				} else {
					roundTrip(t, raw, v, func(v ComputeTemplate) ComputeTemplate { return templateFromConfigMap(templateToConfigMap(&v)) })
				}
			}
		case 1:
			var v Cluster
			if e = decodeJSON(raw, &v); e == nil {
				if vs := validateCluster(&v, "ns"); len(vs) > 0 {
					e = invalid(vs...)
				} else {
					roundTrip(t, raw, v, func(v Cluster) Cluster { return clusterFromRay(clusterToRay(&v, fakeTemplates(v.ClusterSpec))) })
				}
			}
		case 2:
			var v RayJob
			if e = decodeJSON(raw, &v); e == nil {
				if vs := validateJob(&v, "ns"); len(vs) > 0 {
					e = invalid(vs...)
				} else {
					roundTrip(t, raw, v, func(v RayJob) RayJob { return jobFromRay(jobToRay(&v, fakeTemplates(v.ClusterSpec))) })
				}
			}
		case 3:
			var v RayService
			if e = decodeJSON(raw, &v); e == nil {
				if vs := validateService(&v, "ns", ""); len(vs) > 0 {
					e = invalid(vs...)
				} else {
					roundTrip(t, raw, v, func(v RayService) RayService { return serviceFromRay(serviceToRay(&v, fakeTemplates(v.ClusterSpec))) })
				}
			}
		case 4:
			var v RayJobSubmission
			if e = decodeJSON(raw, &v); e == nil {
				if vs := validateSubmission(&v); len(vs) > 0 {
					e = invalid(vs...)
				}
			}
		case 5:
			var v ImagePullJob
			if e = decodeJSON(raw, &v); e == nil {
				if vs := validateImagePullJob(&v, "ns"); len(vs) > 0 {
					e = invalid(vs...)
				} else {
					roundTrip(t, raw, v, func(v ImagePullJob) ImagePullJob { return imagePullJobFromK8s(imagePullJobToK8s(&v)) })
				}
			}
		}
		if e == nil {
			return
		}
		if e.httpStatus < 400 || e.httpStatus >= 500 {
			t.Fatalf("status %d for %q: %s", e.httpStatus, raw, e.Message)
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
func fakeTemplates(s *ClusterSpec) templates {
	ts := templates{}
	for _, ref := range templateNames(s, "clusterSpec") {
		ts[ref.Description] = &ComputeTemplate{Name: ref.Description, CPU: 1, Memory: 1, GPU: 1, ExtendedResources: map[string]uint32{"x.io/y": 1},
			Tolerations: []PodToleration{{Key: "k", Operator: "Exists", Effect: "NoSchedule"}}}
	}
	return ts
}
