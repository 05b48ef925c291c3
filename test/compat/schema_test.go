package compat

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/manta-dev/manta/internal/testutil"
)

// crdFiles are the CRDs that must match KubeRay's, by file name (the same in both directories).
var crdFiles = []string{"ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml", "ray.io_rayservices.yaml"}

// addedEnums are enums Manta adds where KubeRay's schema has none: KubeRay refuses other values later, in the
// operator; Manta refuses them at admission.
var addedEnums = map[string][]string{
	"ray.io_rayjobs.yaml .spec.submissionMode":           {"K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"},
	"ray.io_rayservices.yaml .spec.upgradeStrategy.type": {"NewCluster", "NewClusterWithIncrementalUpgrade", "None"},
}

// groupNameLists are the worker group lists that Manta makes list-maps keyed by groupName, so that group names are
// unique (KubeRay's are atomic lists and the operator checks uniqueness later).
var groupNameLists = []string{
	"ray.io_rayclusters.yaml .spec.workerGroupSpecs",
	"ray.io_rayjobs.yaml .spec.rayClusterSpec.workerGroupSpecs",
	"ray.io_rayservices.yaml .spec.rayClusterConfig.workerGroupSpecs",
}

// relaxedRequired are fields the pinned KubeRay requires and Manta does not, because later KubeRay APIs, which
// Manta serves too, made them optional: Manta accepts every object KubeRay accepts, and more. Any other difference
// in required fields is reported.
var relaxedRequired = map[string][]string{
	// The embedded (rocksdb) GCS backend needs no Redis.
	"ray.io_rayclusters.yaml .spec.gcsFaultToleranceOptions":                  {"redisAddress"},
	"ray.io_rayjobs.yaml .spec.rayClusterSpec.gcsFaultToleranceOptions":       {"redisAddress"},
	"ray.io_rayservices.yaml .spec.rayClusterConfig.gcsFaultToleranceOptions": {"redisAddress"},
	// A deletion condition names a jobStatus or a jobDeploymentStatus (a CEL rule requires one of them).
	"ray.io_rayjobs.yaml .spec.deletionStrategy.deletionRules[].condition": {"jobStatus"},
}

// coreFields name the fields whose schema comes from Kubernetes types (corev1, networkingv1, metav1). Their enums
// and defaults follow the Kubernetes version and are not compared; their field paths and types are.
var coreFields = []string{
	"template", "headService", "serveService", "submitterPodTemplate", "securityContext", "env", "envFrom",
	"volumeMounts", "valueFrom", "ingressRules", "egressRules", "tls", "conditions",
	"autoscalerOptions.resources", "collectorOptions.resources",
}

func repoPaths(t *testing.T) (mantaCRDs, kuberayCRDs string) {
	t.Helper()
	return filepath.Join(testutil.MustRepoRoot(t), "config", "crd"), testutil.KubeRayCRDDir(t)
}

func readCRD(t *testing.T, path string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(b, crd); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return crd
}

func version(crd *apiextensionsv1.CustomResourceDefinition, name string) *apiextensionsv1.CustomResourceDefinitionVersion {
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Name == name {
			return &crd.Spec.Versions[i]
		}
	}
	return nil
}

// flatten maps every field path of a schema (".spec.workerGroupSpecs[].template", "{}" for map values) to its
// schema node.
func flatten(s *apiextensionsv1.JSONSchemaProps, path string, out map[string]*apiextensionsv1.JSONSchemaProps) {
	out[path] = s
	for name, p := range s.Properties {
		flatten(&p, path+"."+name, out)
	}
	if s.Items != nil && s.Items.Schema != nil {
		flatten(s.Items.Schema, path+"[]", out)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		flatten(s.AdditionalProperties.Schema, path+"{}", out)
	}
}

func isCore(path string) bool {
	p := strings.ReplaceAll(strings.ReplaceAll(path, "[]", ""), "{}", "")
	for _, f := range coreFields {
		if strings.Contains(p+".", "."+f+".") {
			return true
		}
	}
	return false
}

func rules(s *apiextensionsv1.JSONSchemaProps) []string {
	var out []string
	for _, r := range s.XValidations {
		out = append(out, r.Rule+" => "+r.Message)
	}
	return out
}

// compareSchemas lists every way in which Manta's schema would refuse, drop or mistype what KubeRay's accepts.
func compareSchemas(file string, kuberay, manta *apiextensionsv1.JSONSchemaProps) []string {
	kp := map[string]*apiextensionsv1.JSONSchemaProps{}
	mp := map[string]*apiextensionsv1.JSONSchemaProps{}
	flatten(kuberay, "", kp)
	flatten(manta, "", mp)
	var problems []string
	bad := func(path, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s %s: %s", file, path, fmt.Sprintf(format, args...)))
	}
	for path, k := range kp {
		m, ok := mp[path]
		if !ok {
			bad(path, "missing in Manta's CRD")
			continue
		}
		if k.Type != m.Type {
			bad(path, "type %q, KubeRay has %q", m.Type, k.Type)
		}
		if k.Format != m.Format {
			bad(path, "format %q, KubeRay has %q", m.Format, k.Format)
		}
		if k.XIntOrString != m.XIntOrString {
			bad(path, "x-kubernetes-int-or-string %v, KubeRay has %v", m.XIntOrString, k.XIntOrString)
		}
		if !reflect.DeepEqual(k.XPreserveUnknownFields, m.XPreserveUnknownFields) {
			bad(path, "x-kubernetes-preserve-unknown-fields differs")
		}
		if k.XEmbeddedResource != m.XEmbeddedResource {
			bad(path, "x-kubernetes-embedded-resource %v, KubeRay has %v", m.XEmbeddedResource, k.XEmbeddedResource)
		}
		if k.XMapType != nil && !reflect.DeepEqual(k.XMapType, m.XMapType) {
			bad(path, "x-kubernetes-map-type differs from KubeRay's %q", *k.XMapType)
		}
		if !reflect.DeepEqual(k.XListType, m.XListType) || !reflect.DeepEqual(k.XListMapKeys, m.XListMapKeys) {
			if !slices.Contains(groupNameLists, file+" "+path) {
				bad(path, "list type %v %v, KubeRay has %v %v", ptrString(m.XListType), m.XListMapKeys, ptrString(k.XListType), k.XListMapKeys)
			}
		}
		if k.Nullable != m.Nullable {
			bad(path, "nullable %v, KubeRay has %v", m.Nullable, k.Nullable)
		}
		for _, r := range m.Required {
			if !slices.Contains(k.Required, r) {
				bad(path, "requires %q, KubeRay does not", r)
			}
		}
		for _, r := range k.Required {
			if !slices.Contains(m.Required, r) && !slices.Contains(relaxedRequired[file+" "+path], r) {
				bad(path, "does not require %q, KubeRay does", r)
			}
		}
		// Every rule KubeRay enforces is kept.
		for _, r := range rules(k) {
			if !slices.Contains(rules(m), r) {
				bad(path, "missing KubeRay's validation rule %q", r)
			}
		}
		if k.Minimum != nil && !reflect.DeepEqual(k.Minimum, m.Minimum) {
			bad(path, "minimum differs from KubeRay's %v", *k.Minimum)
		}
		if k.Maximum != nil && !reflect.DeepEqual(k.Maximum, m.Maximum) {
			bad(path, "maximum differs from KubeRay's %v", *k.Maximum)
		}
		if k.MinItems != nil && !reflect.DeepEqual(k.MinItems, m.MinItems) {
			bad(path, "minItems differs from KubeRay's")
		}
		if isCore(path) {
			continue
		}
		if want, added := addedEnums[file+" "+path]; added && len(k.Enum) == 0 {
			if got := enumValues(m.Enum); !reflect.DeepEqual(got, quoted(want)) {
				bad(path, "enum %v, want the deliberately added %v", got, want)
			}
		} else if got, want := enumValues(m.Enum), enumValues(k.Enum); !reflect.DeepEqual(got, want) {
			bad(path, "enum %v, KubeRay has %v", got, want)
		}
		if got, want := jsonValue(m.Default), jsonValue(k.Default); got != want {
			bad(path, "default %s, KubeRay has %s", got, want)
		}
	}
	// An exception that no longer matches anything would hide a later difference.
	for key, names := range relaxedRequired {
		f, path, _ := strings.Cut(key, " ")
		if f != file {
			continue
		}
		for _, r := range names {
			if k, ok := kp[path]; !ok || !slices.Contains(k.Required, r) {
				bad(path, "listed in relaxedRequired for %q, which KubeRay does not require", r)
			}
		}
	}
	sort.Strings(problems)
	return problems
}

func enumValues(e []apiextensionsv1.JSON) []string {
	var out []string
	for _, v := range e {
		out = append(out, string(v.Raw))
	}
	return out
}

func quoted(values []string) []string {
	var out []string
	for _, v := range values {
		out = append(out, strconv.Quote(v))
	}
	return out
}

func ptrString(p *string) string {
	if p == nil {
		return "<none>"
	}
	return *p
}

func jsonValue(j *apiextensionsv1.JSON) string {
	if j == nil {
		return "<none>"
	}
	return string(j.Raw)
}

func TestCRDSchemasMatchKubeRay(t *testing.T) {
	mantaDir, kuberayDir := repoPaths(t)
	for _, file := range crdFiles {
		t.Run(file, func(t *testing.T) {
			k := readCRD(t, filepath.Join(kuberayDir, file))
			m := readCRD(t, filepath.Join(mantaDir, file))

			if m.Spec.Group != k.Spec.Group || m.Spec.Scope != k.Spec.Scope || !reflect.DeepEqual(m.Spec.Names, k.Spec.Names) {
				t.Errorf("group/scope/names: got %s %s %+v, KubeRay has %s %s %+v",
					m.Spec.Group, m.Spec.Scope, m.Spec.Names, k.Spec.Group, k.Spec.Scope, k.Spec.Names)
			}
			kv, mv := version(k, "v1"), version(m, "v1")
			if kv == nil || mv == nil {
				t.Fatalf("version v1: KubeRay has it %v, Manta has it %v", kv != nil, mv != nil)
			}
			if !mv.Served || !mv.Storage {
				t.Errorf("v1 must be served and the storage version (served %v, storage %v)", mv.Served, mv.Storage)
			}
			if !reflect.DeepEqual(mv.Subresources, kv.Subresources) {
				t.Errorf("subresources %+v, KubeRay has %+v", mv.Subresources, kv.Subresources)
			}
			if !reflect.DeepEqual(mv.AdditionalPrinterColumns, kv.AdditionalPrinterColumns) {
				t.Errorf("printer columns\n got %+v\nwant %+v", mv.AdditionalPrinterColumns, kv.AdditionalPrinterColumns)
			}
			if problems := compareSchemas(file, kv.Schema.OpenAPIV3Schema, mv.Schema.OpenAPIV3Schema); len(problems) > 0 {
				t.Errorf("%d schema differences from KubeRay:\n%s", len(problems), strings.Join(problems, "\n"))
			}
		})
	}
}

// The checker itself must catch what it is there to catch.
func TestCompareSchemasReportsDifferences(t *testing.T) {
	kuberay := &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"spec": {Type: "object", Required: []string{"a"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"a":    {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"x"`)}}},
			"b":    {Type: "integer", Default: &apiextensionsv1.JSON{Raw: []byte(`1`)}},
			"c":    {XIntOrString: true},
			"gone": {Type: "boolean"},
		}},
	}}
	manta := &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"spec": {Type: "object", Required: []string{"b"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"a": {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"y"`)}}},
			"b": {Type: "integer"},
			"c": {Type: "string"},
		}},
	}}
	got := compareSchemas("f", kuberay, manta)
	for _, want := range []string{".spec.a: enum", ".spec.b: default", ".spec.c: type", ".spec.c: x-kubernetes-int-or-string", ".spec.gone: missing",
		`.spec: requires "b", KubeRay does not`, `.spec: does not require "a", KubeRay does`} {
		if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("no problem reported for %q; got %q", want, got)
		}
	}
}
