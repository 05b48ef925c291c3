package swap

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/devcluster"
)

const (
	// rayImage is the image the dev cluster's registry serves to the real node.
	rayImage = "rayproject/ray:2.52.0"
	// kwokLabel marks the kwok nodes the idle RayClusters are placed on.
	kwokLabel = "swap.manta.dev/kwok"
	// releaseFile, once it exists in the RayJob's head container, ends the entrypoint.
	releaseFile = "/tmp/swap-release"
	// appsDir is where the RayService's head mounts the ConfigMap holding the Serve application's zip.
	appsDir = "/home/ray/serve-apps"
)

// holdEntrypoint runs until releaseFile exists: a driver that is RUNNING for as long as the test needs, and ends
// when the test says so, not after a guessed time.
var holdEntrypoint = fmt.Sprintf(`python -c "import os, time
print('swap-job started', flush=True)
while not os.path.exists('%s'):
    time.sleep(0.2)
print('swap-job released', flush=True)"`, releaseFile)

// echoApp is the Serve application: it answers every request with "swap-ok".
const echoApp = `from ray import serve


@serve.deployment
class Echo:
    async def __call__(self, request):
        return "swap-ok"


app = Echo.bind()
`

// serveConfig runs echoApp from the mounted zip (Ray 2.52 fetches a working_dir over file://, not plain http, and
// this machine has no internet). The replica asks for no CPU: the head's one Ray CPU stays free.
var serveConfig = fmt.Sprintf(`applications:
- name: echo
  import_path: echo:app
  route_prefix: /
  runtime_env:
    working_dir: file://%s/apps.zip
  deployments:
  - name: Echo
    num_replicas: 1
    ray_actor_options:
      num_cpus: 0
`, appsDir)

// rayContainer is a Ray container of cpu requested (no CPU limit: a busy machine must not throttle a head's
// processes as they start) and mem.
func rayContainer(name, cpu, mem string) corev1.Container {
	return corev1.Container{
		Name: name, Image: rayImage,
		Env: []corev1.EnvVar{{Name: "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT", Value: "600"}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem)},
		},
	}
}

// realHead is a head-only cluster spec for the real node: 400m requested, one Ray CPU, for drivers and Serve.
func realHead() rayv1.RayClusterSpec {
	return rayv1.RayClusterSpec{
		RayVersion: "2.52.0",
		HeadGroupSpec: rayv1.HeadGroupSpec{
			RayStartParams: map[string]string{"num-cpus": "1"},
			Template:       corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{rayContainer("ray-head", "400m", "2Gi")}}},
		},
	}
}

// kwokCluster is a RayCluster of a head and one worker on the kwok nodes: pods that never run Ray, which the
// operators only keep.
func kwokCluster(ns, name string) *rayv1.RayCluster {
	onKwok := func(c corev1.Container) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers:   []corev1.Container{c},
			NodeSelector: map[string]string{kwokLabel: "true"},
			Tolerations:  []corev1.Toleration{{Key: devcluster.FakeNodeTaint, Operator: corev1.TolerationOpExists}},
		}}
	}
	one := int32(1)
	return &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: rayv1.RayClusterSpec{
			RayVersion:    "2.52.0",
			HeadGroupSpec: rayv1.HeadGroupSpec{RayStartParams: map[string]string{}, Template: onKwok(rayContainer("ray-head", "1", "2Gi"))},
			WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{
				GroupName: "workers", Replicas: &one, MinReplicas: &one, MaxReplicas: &one,
				RayStartParams: map[string]string{}, Template: onKwok(rayContainer("ray-worker", "1", "1Gi")),
			}},
		},
	}
}

// holdJob is a RayJob (K8sJobMode: a submitter Job submits the entrypoint and follows its logs) on a head-only
// cluster of the real node, running holdEntrypoint.
func holdJob(ns string) *rayv1.RayJob {
	spec := realHead()
	return &rayv1.RayJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hold"},
		Spec:       rayv1.RayJobSpec{Entrypoint: holdEntrypoint, RayClusterSpec: &spec},
	}
}

// echoService is a RayService serving echoApp from a head-only cluster of the real node.
func echoService(ns string) *rayv1.RayService {
	spec := realHead()
	tpl := &spec.HeadGroupSpec.Template.Spec
	tpl.Volumes = []corev1.Volume{{Name: "serve-apps", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "serve-apps"}},
	}}}
	tpl.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "serve-apps", MountPath: appsDir, ReadOnly: true}}
	return &rayv1.RayService{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "echo"},
		Spec:       rayv1.RayServiceSpec{ServeConfigV2: serveConfig, RayClusterSpec: spec},
	}
}

// appsConfigMap holds echoApp as apps.zip, under one top-level directory (Ray takes it as the working directory).
func appsConfigMap(ns string) (*corev1.ConfigMap, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create("apps/echo.py")
	if err != nil {
		return nil, err
	}
	if _, err := io.WriteString(w, echoApp); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "serve-apps", Namespace: ns}, BinaryData: map[string][]byte{"apps.zip": buf.Bytes()}}, nil
}

// uids is what a swap must leave alone: the UID of every pod, Service, Job and RayCluster of the namespace, by
// "<kind>/<name>".
type uids map[string]types.UID

func snapshot(ctx context.Context, cl client.Client, ns string) (uids, error) {
	out := uids{}
	lists := []struct {
		kind string
		list client.ObjectList
	}{
		{"pod", &corev1.PodList{}}, {"service", &corev1.ServiceList{}}, {"job", &batchv1.JobList{}}, {"raycluster", &rayv1.RayClusterList{}},
	}
	for _, l := range lists {
		if err := cl.List(ctx, l.list, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		if err := meta.EachListItem(l.list, func(o runtime.Object) error {
			m, err := meta.Accessor(o)
			if err != nil {
				return err
			}
			out[l.kind+"/"+m.GetName()] = m.GetUID()
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// diff lists what differs between two snapshots: objects gone, objects new, objects of the same name with
// another UID (recreated).
func (before uids) diff(after uids) (gone, added, recreated []string) {
	for k, u := range before {
		switch a, ok := after[k]; {
		case !ok:
			gone = append(gone, k)
		case a != u:
			recreated = append(recreated, k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			added = append(added, k)
		}
	}
	sort.Strings(gone)
	sort.Strings(added)
	sort.Strings(recreated)
	return gone, added, recreated
}

// count the objects of kind in the snapshot.
func (s uids) count(kind string) int {
	n := 0
	for k := range s {
		if strings.HasPrefix(k, kind+"/") {
			n++
		}
	}
	return n
}

// prober POSTs to the Serve endpoint one request after the other, each on a fresh connection (so each goes
// through cluster DNS and kube-proxy to whatever endpoint the Service has then), and counts the answers that are
// not 200 "swap-ok".
type prober struct {
	url            string
	hc             *http.Client
	sent, failed   atomic.Int64
	mu             sync.Mutex
	firstFailures  []string
	stopped, ended chan struct{}
}

func newProber(c *devcluster.Cluster, url string) *prober {
	return &prober{
		url: url,
		hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			Proxy: nil, DialContext: c.DialContext, DisableKeepAlives: true,
		}},
		stopped: make(chan struct{}), ended: make(chan struct{}),
	}
}

// once sends one request and says what went wrong, if anything.
func (p *prober) once(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "swap-ok" {
		return fmt.Errorf("status %d, body %q", resp.StatusCode, body)
	}
	return nil
}

func (p *prober) run(ctx context.Context) {
	defer close(p.ended)
	for {
		select {
		case <-p.stopped:
			return
		case <-ctx.Done():
			return
		default:
		}
		err := p.once(ctx)
		p.sent.Add(1)
		if err != nil && ctx.Err() == nil {
			p.failed.Add(1)
			p.mu.Lock()
			if len(p.firstFailures) < 10 {
				p.firstFailures = append(p.firstFailures, time.Now().Format(time.RFC3339Nano)+" "+err.Error())
			}
			p.mu.Unlock()
		}
		// A steady trickle, not a flood: the machine has two busy cores.
		select {
		case <-p.stopped:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *prober) stop() {
	select {
	case <-p.stopped:
	default:
		close(p.stopped)
	}
	<-p.ended
}

func (p *prober) failures() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.firstFailures...)
}

// statusDigest is an object's status as JSON without timestamps (lastUpdateTime, lastTransitionTime and the like
// move on every write and say nothing of what the operator concluded).
func statusDigest(status any) (string, error) {
	b, err := json.Marshal(status)
	if err != nil {
		return "", err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "", err
	}
	b, err = json.Marshal(dropTimes(v))
	return string(b), err
}

func dropTimes(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if s, ok := e.(string); ok {
				if _, err := time.Parse(time.RFC3339, s); err == nil {
					continue
				}
			}
			out[k] = dropTimes(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = dropTimes(e)
		}
		return out
	}
	return v
}
