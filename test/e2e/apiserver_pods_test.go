package e2e

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestRESTClusterPodsDefineMyPodIP creates a cluster through the REST API the way KubeRay's Go client does (proto
// field names, numbers as strings) with KubeRay's usual worker rayStartParams, node-ip-address: $MY_POD_IP, and
// checks the pods the operator creates on the dev cluster: the Ray container defines MY_POD_IP from status.podIP
// before the generated ray start command that uses it, kwok gives the pod the IP it resolves to, and workers have
// KubeRay's ray stop preStop hook.
func TestRESTClusterPodsDefineMyPodIP(t *testing.T) {
	c, cl := devCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "rest-kuberay"
	if err := testutil.CreateNamespace(ctx, cl, ns); err != nil {
		t.Fatal(err)
	}
	s, err := apiserver.New(c.RESTConfig(), apiserver.Options{Auth: apiserver.AuthNone})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	post := func(path, body string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/apis/v1/namespaces/"+ns+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, res.StatusCode, raw)
		}
	}
	post("/compute_templates", `{"name":"small","namespace":"`+ns+`","cpu":"1","memory":"2"}`)
	post("/clusters", `{"name":"kr","namespace":"`+ns+`","user":"u","version":"2.52.0","cluster_spec":{`+
		`"head_group_spec":{"compute_template":"small","ray_start_params":{"dashboard-host":"0.0.0.0","node-ip-address":"$MY_POD_IP"}},`+
		`"worker_group_spec":[{"group_name":"workers","compute_template":"small","replicas":"1","max_replicas":"2",`+
		`"ray_start_params":{"node-ip-address":"$MY_POD_IP"}}]}}`)

	var pods corev1.PodList
	testutil.Eventually(t, 2*time.Minute, "head and worker pods running with an IP", func() (bool, string) {
		if err := cl.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"ray.io/cluster": "kr"}); err != nil {
			return false, err.Error()
		}
		if len(pods.Items) != 2 {
			return false, "pods: " + strconv.Itoa(len(pods.Items))
		}
		for _, p := range pods.Items {
			if p.Status.PodIP == "" {
				return false, p.Name + " has no IP yet"
			}
		}
		return true, ""
	})
	for _, p := range pods.Items {
		nodeType := p.Labels["ray.io/node-type"]
		ray := p.Spec.Containers[0]
		names := make([]string, len(ray.Env))
		for i, e := range ray.Env {
			names[i] = e.Name
		}
		ip, cmd := slices.Index(names, "MY_POD_IP"), slices.Index(names, "KUBERAY_GEN_RAY_START_CMD")
		if ip < 0 || cmd < 0 || ip > cmd {
			t.Errorf("%s pod: MY_POD_IP (at %d) must come before KUBERAY_GEN_RAY_START_CMD (at %d): %v", nodeType, ip, cmd, names)
			continue
		}
		if f := ray.Env[ip].ValueFrom; f == nil || f.FieldRef == nil || f.FieldRef.FieldPath != "status.podIP" {
			t.Errorf("%s pod: MY_POD_IP is not from status.podIP: %+v", nodeType, ray.Env[ip])
		}
		if gen := ray.Env[cmd].Value; !strings.Contains(gen, "--node-ip-address=$MY_POD_IP") {
			t.Errorf("%s pod: generated command does not use $MY_POD_IP: %s", nodeType, gen)
		}
		if args := strings.Join(ray.Args, " "); !strings.Contains(args, "--node-ip-address=$MY_POD_IP") || !slices.Contains(ray.Command, "/bin/bash") {
			t.Errorf("%s pod: the container does not run the command through a shell that expands $MY_POD_IP: %v %v", nodeType, ray.Command, ray.Args)
		}
		stop := ray.Lifecycle
		switch nodeType {
		case "worker":
			if stop == nil || stop.PreStop == nil || stop.PreStop.Exec == nil || strings.Join(stop.PreStop.Exec.Command, " ") != "/bin/sh -c ray stop" {
				t.Errorf("worker pod: preStop %+v, want /bin/sh -c ray stop", stop)
			}
			if !slices.Contains(names, "MY_POD_NAME") || !slices.Contains(names, "CPU_REQUEST") || !slices.Contains(names, "MEMORY_LIMITS") {
				t.Errorf("worker pod lacks KubeRay's env: %v", names)
			}
		case "head":
			if stop != nil && stop.PreStop != nil {
				t.Errorf("head pod has a preStop: %+v", stop)
			}
		default:
			t.Errorf("pod %s has node type %q", p.Name, nodeType)
		}
	}
}
