package apiserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDecodeProtoJSON pins the protobuf JSON mapping the decoder follows, one rule per row.
func TestDecodeProtoJSON(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		mode    FieldValidation
		want    ComputeTemplate
		unknown []string
		// bad is the field a 400 names; empty means accepted.
		bad string
	}{
		{name: "JSON names", body: `{"name":"a","gpuAccelerator":"x.io/gpu","memoryUnit":"Mi"}`,
			want: ComputeTemplate{Name: "a", GPUAccelerator: "x.io/gpu", MemoryUnit: "Mi"}},
		{name: "proto names", body: `{"name":"a","gpu_accelerator":"x.io/gpu","memory_unit":"Mi","extended_resources":{"e.io/x":2}}`,
			want: ComputeTemplate{Name: "a", GPUAccelerator: "x.io/gpu", MemoryUnit: "Mi", ExtendedResources: map[string]uint32{"e.io/x": 2}}},
		{name: "integers as strings", body: `{"cpu":"2","memory":"4294967295","extended_resources":{"e.io/x":"3"}}`,
			want: ComputeTemplate{CPU: 2, Memory: 4294967295, ExtendedResources: map[string]uint32{"e.io/x": 3}}},
		{name: "integral floats and exponents", body: `{"cpu":2.0,"memory":"1e3"}`, want: ComputeTemplate{CPU: 2, Memory: 1000}},
		{name: "null is unset", body: `{"name":null,"cpu":null,"tolerations":null,"extendedResources":{"a.io/b":null}}`,
			want: ComputeTemplate{ExtendedResources: map[string]uint32{}}},
		{name: "unknown fields are reported in the caller's terms", body: `{"name":"a","colour":"red","tolerations":[{"key":"k","keyy":"x"}]}`,
			want: ComputeTemplate{Name: "a", Tolerations: []PodToleration{{Key: "k"}}}, unknown: []string{"colour", "tolerations[0].keyy"}},
		{name: "unknown fields refused under Strict", body: `{"name":"a","colour":"red"}`, mode: FieldValidationStrict, bad: "colour"},
		{name: "both names", body: `{"memoryUnit":"Gi","memory_unit":"Mi"}`, bad: "memoryUnit"},
		{name: "out of range", body: `{"cpu":"4294967296"}`, bad: "cpu"},
		{name: "negative unsigned", body: `{"cpu":-1}`, bad: "cpu"},
		{name: "fraction", body: `{"cpu":"1.5"}`, bad: "cpu"},
		{name: "padded number string", body: `{"cpu":" 1"}`, bad: "cpu"},
		{name: "string for a string field only", body: `{"name":1}`, bad: "name"},
		{name: "null in a list", body: `{"tolerations":[null]}`, bad: "tolerations[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mode := tc.mode
			if mode == "" {
				mode = FieldValidationWarn
			}
			var got ComputeTemplate
			unknown, e := decodeJSON([]byte(tc.body), &got, mode)
			if tc.bad != "" {
				if e == nil || len(e.Violations()) == 0 || e.Violations()[0].Field != tc.bad {
					t.Fatalf("want a 400 naming %q, got %+v", tc.bad, e)
				}
				return
			}
			if e != nil {
				t.Fatalf("refused: %s", e.Message)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("decoded (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.unknown, unknown); d != "" {
				t.Errorf("unknown fields (-want +got):\n%s", d)
			}
		})
	}

	// Enums by name or number, floats as strings, booleans as KubeRay's Python client sends them.
	var j RayJobSubmission
	if _, e := decodeJSON([]byte(`{"entrypoint":"x","entrypoint_num_cpus":"0.5","entrypointNumGpus":1}`), &j, FieldValidationWarn); e != nil || j.EntrypointNumCpus != 0.5 || j.EntrypointNumGpus != 1 {
		t.Errorf("floats: %+v %v", j, e)
	}
	for _, bad := range []string{`"NaN"`, `"Infinity"`, `"1e39"`, `true`} {
		if _, e := decodeJSON([]byte(`{"entrypoint_num_cpus":`+bad+`}`), &j, FieldValidationWarn); e == nil || e.Violations()[0].Field != "entrypointNumCpus" {
			t.Errorf("entrypointNumCpus %s accepted", bad)
		}
	}
	var v Volume
	if _, e := decodeJSON([]byte(`{"volume_type":"EMPTY_DIR","read_only":"true","mountPropagationMode":2}`), &v, FieldValidationWarn); e != nil ||
		v.VolumeType != VolumeEmptyDir || !v.ReadOnly || v.MountPropagationMode != PropagationBidirectional {
		t.Errorf("enums and booleans: %+v %v", v, e)
	}
	for _, bad := range []string{`{"volumeType":"1"}`, `{"volumeType":6}`, `{"readOnly":"yes"}`, `{"readOnly":1}`} {
		if _, e := decodeJSON([]byte(bad), &v, FieldValidationWarn); e == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// TestFieldValidationMode checks how the request's ?fieldValidation and the server's setting combine.
func TestFieldValidationMode(t *testing.T) {
	for _, tc := range []struct {
		query  string
		server FieldValidation
		want   FieldValidation
		bad    bool
	}{
		{"", FieldValidationWarn, FieldValidationWarn, false},
		{"fieldValidation=Strict", FieldValidationWarn, FieldValidationStrict, false},
		{"fieldValidation=Warn", FieldValidationStrict, FieldValidationStrict, false},
		{"", FieldValidationStrict, FieldValidationStrict, false},
		{"fieldValidation=Ignore", FieldValidationWarn, "", true},
		{"fieldValidation=strict", FieldValidationWarn, "", true},
		{"fieldValidation=Warn&fieldValidation=Strict", FieldValidationWarn, "", true},
	} {
		r := httptest.NewRequest(http.MethodPost, "/x?"+tc.query, nil)
		got, e := requestFieldValidation(r, tc.server)
		if (e != nil) != tc.bad || got != tc.want {
			t.Errorf("%q on a %s server: %q, %v", tc.query, tc.server, got, e)
		}
	}
}

func TestWarningHeader(t *testing.T) {
	for in, want := range map[string]string{
		`unknown field "a.b"`:  `299 - "unknown field \"a.b\""`,
		"back\\slash\nnewline": `299 - "back\\slash newline"`,
	} {
		if got := warning(in); got != want {
			t.Errorf("warning(%q) = %s, want %s", in, got, want)
		}
	}
	if !strings.HasPrefix(warning("x"), "299 - ") {
		t.Error("not a 299 warning")
	}
}
