package envtest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/apiserver/apiservertest"
)

// testKubeRayClients sends requests in the shapes KubeRay's own clients send (its Go client uses proto field
// names, its Python client adds fields the proto lacks, both send a raw token) and checks the answers KubeRay's
// server would give, plus Manta's promise that unknown fields never pass silently.
func (e *testEnv) testKubeRayClients(t *testing.T) {
	ns := e.Namespace(t)
	mustOK(t, e.do(t, "POST", "/apis/v1/namespaces/"+ns+"/compute_templates", apiservertest.Template(ns, "small")), nil)
	strict, err := apiserver.New(e.cfg, apiserver.Options{Auth: apiserver.AuthNone, Log: logr.Discard(), FieldValidation: apiserver.FieldValidationStrict})
	if err != nil {
		t.Fatal(err)
	}
	strictSrv := httptest.NewServer(strict.Handler())
	t.Cleanup(strictSrv.Close)

	api := "/apis/v1/namespaces/" + ns
	n := 0
	name := func() string { n++; return fmt.Sprintf("k%d", n) }
	// clusterBody is a cluster as KubeRay's Go client marshals it (proto field names), with extra fields spliced in.
	clusterBody := func(name, headExtra, workerExtra string) string {
		return `{"name":"` + name + `","namespace":"` + ns + `","user":"u","version":"2.52.0","environment":"DEV",` +
			`"cluster_spec":{"head_group_spec":{"compute_template":"small","image":"rayproject/ray:2.52.0","service_type":"ClusterIP",` +
			`"ray_start_params":{"dashboard-host":"0.0.0.0"},"service_account":"ray-sa","image_pull_secret":"regcred"` + headExtra + `},` +
			`"worker_group_spec":[{"group_name":"workers","compute_template":"small","replicas":"2","min_replicas":"0","max_replicas":"5",` +
			`"ray_start_params":{"node-ip-address":"$MY_POD_IP"}` + workerExtra + `}]}}`
	}
	const unknownWarning = `299 - "unknown field \"clusterSpec.headGroupSpec.imagePullPolicies\""`

	for _, tc := range []struct {
		name   string
		server string // "" open, "strict" started with --field-validation=Strict
		path   string
		body   func(name string) string
		code   int
		// field is named by a 400's details; warnings are the Warning headers of the answer, in order.
		field    string
		warnings []string
		check    func(t *testing.T, name string, r resp)
	}{
		{name: "template with proto names and numbers as strings", path: "/compute_templates",
			body: func(n string) string {
				return `{"name":"` + n + `","namespace":"` + ns + `","cpu":"4","memory":"8","gpu":0,"gpu_accelerator":"nvidia.com/gpu","memory_unit":"Gi","extended_resources":{"vpc.amazonaws.com/efa":"1"}}`
			}, code: 200,
			check: func(t *testing.T, _ string, r resp) {
				var got apiserver.ComputeTemplate
				r.decode(t, &got)
				if got.CPU != 4 || got.Memory != 8 || got.GPUAccelerator != "nvidia.com/gpu" || got.ExtendedResources["vpc.amazonaws.com/efa"] != 1 {
					t.Errorf("template: %+v", got)
				}
			}},
		{name: "cluster from KubeRay's Go client", path: "/clusters", body: func(n string) string { return clusterBody(n, "", "") }, code: 200,
			check: func(t *testing.T, n string, r resp) {
				// Answers keep the JSON names.
				if s := string(r.body); !strings.Contains(s, `"clusterSpec"`) || strings.Contains(s, "cluster_spec") || !strings.Contains(s, `"groupName":"workers"`) {
					t.Errorf("answer does not use JSON names: %s", s)
				}
				var rc rayv1.RayCluster
				if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: n}, &rc); err != nil {
					t.Fatal(err)
				}
				h, w := rc.Spec.HeadGroupSpec.Template.Spec, rc.Spec.WorkerGroupSpecs[0]
				if h.ServiceAccountName != "ray-sa" || len(h.ImagePullSecrets) != 1 || h.ImagePullSecrets[0].Name != "regcred" {
					t.Errorf("head pod spec: %+v", h)
				}
				if *w.Replicas != 2 || *w.MinReplicas != 2 || *w.MaxReplicas != 5 || w.RayStartParams["node-ip-address"] != "$MY_POD_IP" {
					t.Errorf("worker group (minReplicas 0 is stored as replicas, as KubeRay does): %+v", w)
				}
				if rc.Labels["ray.io/environment"] != "DEV" {
					t.Errorf("environment label %q", rc.Labels["ray.io/environment"])
				}
			}},
		{name: "cluster from KubeRay's Python client", path: "/clusters",
			// Its to_dict: JSON names with a few proto names, enums as numbers, enableIngress as a string.
			body: func(n string) string {
				return `{"name":"` + n + `","namespace":"` + ns + `","user":"u","version":"2.52.0","environment":0,"clusterSpec":{` +
					`"headGroupSpec":{"computeTemplate":"small","rayStartParams":{"dashboard-host":"0.0.0.0"},"image":"rayproject/ray:2.52.0",` +
					`"serviceType":"ClusterIP","enableIngress":"true","service_account":"ray-sa","image_pull_secret":"regcred",` +
					`"volumes":[{"name":"logs","mountPath":"/var/log/ray","source":"/tmp/ray","volumeType":1,"hostPathType":0}]},` +
					`"workerGroupSpec":[{"groupName":"workers","computeTemplate":"small","replicas":1,"minReplicas":0,"maxReplicas":2,` +
					`"rayStartParams":{"node-ip-address":"$MY_POD_IP"},"service_account":"ray-sa","imagePullSecret":"regcred",` +
					`"environment":{"values":{"A":"1"},"valuesFrom":{"IP":{"source":3,"key":"status.podIP"}}}}]}}`
			}, code: 200,
			check: func(t *testing.T, n string, r resp) {
				var rc rayv1.RayCluster
				if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: n}, &rc); err != nil {
					t.Fatal(err)
				}
				h, w := rc.Spec.HeadGroupSpec, rc.Spec.WorkerGroupSpecs[0].Template.Spec
				if h.EnableIngress == nil || !*h.EnableIngress || h.Template.Spec.ServiceAccountName != "ray-sa" || w.ServiceAccountName != "ray-sa" ||
					len(w.ImagePullSecrets) != 1 || len(h.Template.Spec.Volumes) != 1 || h.Template.Spec.Volumes[0].HostPath == nil {
					t.Errorf("stored: head %+v, worker %+v", h, w)
				}
				var ip *corev1.EnvVar
				for i, e := range w.Containers[0].Env {
					if e.Name == "IP" {
						ip = &w.Containers[0].Env[i]
					}
				}
				if ip == nil || ip.ValueFrom == nil || ip.ValueFrom.FieldRef == nil || ip.ValueFrom.FieldRef.FieldPath != "status.podIP" {
					t.Errorf("FIELD env from key: %+v", ip)
				}
			}},
		{name: "enums by number, null as unset", path: "/clusters",
			body: func(n string) string {
				return strings.Replace(clusterBody(n, `,"volumes":[{"name":"v","mount_path":"/v","volume_type":5,"read_only":null}]`, ""),
					`"environment":"DEV"`, `"environment":3,"annotations":null,"envs":null`, 1)
			}, code: 200,
			check: func(t *testing.T, _ string, r resp) {
				var got apiserver.Cluster
				r.decode(t, &got)
				if got.Environment != 3 || got.ClusterSpec.HeadGroupSpec.Volumes[0].VolumeType != apiserver.VolumeEmptyDir {
					t.Errorf("enums: %+v", got)
				}
			}},
		{name: "integral numbers in any form", path: "/clusters",
			body: func(n string) string {
				return strings.Replace(clusterBody(n, "", ""), `"replicas":"2","min_replicas":"0","max_replicas":"5"`, `"replicas":2.0,"min_replicas":"1","max_replicas":"5e0"`, 1)
			}, code: 200},
		{name: "unknown field warns by default", path: "/clusters",
			body:     func(n string) string { return clusterBody(n, `,"imagePullPolicies":"Always"`, "") },
			code:     200,
			warnings: []string{unknownWarning}},
		{name: "unknown fields in the caller's terms, each warned", path: "/clusters",
			body: func(n string) string {
				return strings.Replace(clusterBody(n, "", `,"colour":"red"`), `"user":"u"`, `"user":"u","deprecated_field":1`, 1)
			},
			code: 200,
			warnings: []string{`299 - "unknown field \"clusterSpec.workerGroupSpec[0].colour\""`,
				`299 - "unknown field \"deprecated_field\""`}},
		{name: "unknown field refused under ?fieldValidation=Strict", path: "/clusters?fieldValidation=Strict",
			body: func(n string) string { return clusterBody(n, `,"imagePullPolicies":"Always"`, "") },
			code: 400, field: "clusterSpec.headGroupSpec.imagePullPolicies"},
		{name: "unknown field refused by a Strict server", server: "strict", path: "/clusters",
			body: func(n string) string { return clusterBody(n, `,"imagePullPolicies":"Always"`, "") },
			code: 400, field: "clusterSpec.headGroupSpec.imagePullPolicies"},
		{name: "a Strict server cannot be relaxed per request", server: "strict", path: "/clusters?fieldValidation=Warn",
			body: func(n string) string { return clusterBody(n, `,"imagePullPolicies":"Always"`, "") },
			code: 400, field: "clusterSpec.headGroupSpec.imagePullPolicies"},
		{name: "Ignore is not offered", path: "/clusters?fieldValidation=Ignore",
			body: func(n string) string { return clusterBody(n, "", "") }, code: 400, field: "fieldValidation"},
		{name: "a bad value is refused even with unknown fields warned", path: "/clusters",
			body: func(n string) string {
				return clusterBody(n, `,"imagePullPolicy":"Sometimes","imagePullPolicies":"x"`, "")
			},
			code: 400, field: "clusterSpec.headGroupSpec.imagePullPolicy", warnings: []string{unknownWarning}},
		{name: "negative replicas as a string", path: "/clusters",
			body: func(n string) string {
				return strings.Replace(clusterBody(n, "", ""), `"replicas":"2"`, `"replicas":"-1"`, 1)
			}, code: 400, field: "clusterSpec.workerGroupSpec[0].replicas"},
		{name: "a number that is not one", path: "/compute_templates",
			body: func(n string) string { return `{"name":"` + n + `","namespace":"` + ns + `","cpu":"two","memory":4}` },
			code: 400, field: "cpu"},
		{name: "a fractional integer", path: "/compute_templates",
			body: func(n string) string { return `{"name":"` + n + `","namespace":"` + ns + `","cpu":1.5,"memory":4}` },
			code: 400, field: "cpu"},
		{name: "an enum that does not exist", path: "/clusters",
			body: func(n string) string { return strings.Replace(clusterBody(n, "", ""), `"DEV"`, `"MARS"`, 1) },
			code: 400, field: "environment"},
		{name: "the JSON name and the proto name together", path: "/clusters",
			body: func(n string) string {
				return strings.Replace(clusterBody(n, "", ""), `"user":"u"`, `"user":"u","clusterSpec":{}`, 1)
			}, code: 400, field: "clusterSpec"},
		{name: "job from KubeRay's Go client", path: "/jobs",
			body: func(n string) string {
				return `{"name":"` + n + `","namespace":"` + ns + `","user":"u","version":"2.52.0","entrypoint":"python -V",` +
					`"runtime_env":"pip: [requests]\n","shutdown_after_job_finishes":true,"ttl_seconds_after_finished":"60",` +
					`"entrypointNumCpus":"0.5","activeDeadlineSeconds":"600","cluster_selector":{"ray.io/cluster":"somewhere"}}`
			}, code: 200,
			check: func(t *testing.T, n string, r resp) {
				var rj rayv1.RayJob
				if err := e.k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: n}, &rj); err != nil {
					t.Fatal(err)
				}
				s := rj.Spec
				if s.RuntimeEnvYAML == "" || !s.ShutdownAfterJobFinishes || s.TTLSecondsAfterFinished != 60 || s.EntrypointNumCpus != 0.5 ||
					*s.ActiveDeadlineSeconds != 600 || s.ClusterSelector["ray.io/cluster"] != "somewhere" {
					t.Errorf("stored job: %+v", s)
				}
			}},
		{name: "service from KubeRay's Go client", path: "/services",
			body: func(n string) string {
				b := clusterBody(n, "", "")
				b = strings.Replace(b, `"environment":"DEV",`, `"serve_config_V2":"applications: []\n","service_unhealthy_second_threshold":"30",`, 1)
				return b
			}, code: 200,
			check: func(t *testing.T, _ string, r resp) {
				var got apiserver.RayService
				r.decode(t, &got)
				if got.ServeConfigV2 != "applications: []\n" || got.ServiceUnhealthySecondThreshold != 30 {
					t.Errorf("service: %+v", got)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := e.open.URL
			if tc.server == "strict" {
				base = strictSrv.URL
			}
			n := name()
			r := call(t, base, "POST", api+tc.path, tc.body(n), "")
			if r.code != tc.code {
				t.Fatalf("want %d, got %d: %s", tc.code, r.code, r.body)
			}
			if d := slices.Compare(tc.warnings, r.header.Values("Warning")); d != 0 {
				t.Errorf("Warning headers %q, want %q", r.header.Values("Warning"), tc.warnings)
			}
			if tc.field != "" {
				mustFail(t, r, 400, code.Code_INVALID_ARGUMENT, tc.field)
				// KubeRay's Go client decodes error bodies with protobuf's JSON codec.
				st := apiservertest.DecodeRPCStatus(t, r.body)
				if fv := st.GetFieldViolations(); len(fv) == 0 || !slices.ContainsFunc(fv, func(v *errdetails.BadRequest_FieldViolation) bool { return v.Field == tc.field }) {
					t.Errorf("google.rpc.BadRequest violations %v do not name %q", fv, tc.field)
				}
			}
			if tc.check != nil {
				tc.check(t, n, r)
			}
		})
	}

	t.Run("warnings are bounded", func(t *testing.T) {
		const maxWarnings = 20 // the server's bound on Warning headers
		var extra strings.Builder
		for i := range maxWarnings + 5 {
			fmt.Fprintf(&extra, `,"x%02d":1`, i)
		}
		r := call(t, e.open.URL, "POST", api+"/clusters", clusterBody(name(), extra.String(), ""), "")
		ws := r.header.Values("Warning")
		if r.code != 200 || len(ws) != maxWarnings+1 || ws[maxWarnings] != `299 - "5 more unknown fields"` {
			t.Errorf("%d, %d warnings: %q", r.code, len(ws), ws)
		}
	})

	t.Run("job submission with proto names", func(t *testing.T) {
		mustOK(t, e.do(t, "POST", api+"/clusters", apiservertest.Cluster(ns, "live")), nil)
		body := `{"entrypoint":"python job.py","submission_id":"kuberay-proto-1","runtime_env":"env_vars:\n  X: \"1\"\n",` +
			`"entrypoint_num_cpus":"1","entrypoint_resources":{"custom":"1"}}`
		var reply apiserver.SubmitRayJobReply
		mustOK(t, call(t, e.open.URL, "POST", api+"/jobsubmissions/live", body, ""), &reply)
		var info apiserver.JobSubmissionInfo
		mustOK(t, e.do(t, "GET", api+"/jobsubmissions/live/kuberay-proto-1", nil), &info)
		if reply.SubmissionID != "kuberay-proto-1" || info.Entrypoint != "python job.py" || info.RuntimeEnv["env_vars"] != `{"X":"1"}` {
			t.Errorf("reply %+v, info %+v", reply, info)
		}
	})

	t.Run("raw token, as KubeRay's clients send it", func(t *testing.T) {
		tok := e.serviceAccountToken(t, ns, "kuberay-client")
		rule := rbacv1.PolicyRule{APIGroups: []string{"ray.io"}, Resources: []string{"rayclusters"}, Verbs: []string{"list"}}
		e.grant(t, ns, "kuberay-client", rule)
		e.waitRBAC(t, ns, "kuberay-client", ns, rule)
		for _, h := range []string{tok, "Bearer " + tok, "bearer " + tok} {
			r := callWith(t, e.guarded.URL, "GET", api+"/clusters", nil, http.Header{"Authorization": {h}})
			if r.code != 200 {
				t.Errorf("Authorization %q...: %d %s", h[:10], r.code, r.body)
			}
		}
		for _, h := range []string{"Basic " + tok, "Bearer", ""} {
			r := callWith(t, e.guarded.URL, "GET", api+"/clusters", nil, http.Header{"Authorization": {h}})
			mustFail(t, r, 401, code.Code_UNAUTHENTICATED, "")
		}
	})
}
