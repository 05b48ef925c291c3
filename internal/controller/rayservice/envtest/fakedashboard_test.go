package envtest

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"

	"github.com/manta-dev/manta/internal/ray"
)

// fakeRay stands in for the Ray heads of the envtest clusters: a Serve controller per head Service that keeps the
// last deployed config, and Serve proxies per pod. Tests steer it (application status, outages, lost state).
type fakeRay struct {
	mu    sync.Mutex
	heads map[string]*fakeHead // by head Service name (<cluster>-head-svc)
	// proxyDown lists pods whose Serve proxy does not answer.
	proxyDown map[string]bool
}

type fakeHead struct {
	// details counts GetServeDetails calls: one per reconcile that observes the cluster.
	details int
	deploys int
	config  string
	apps    []string
	// appStatus is what Ray reports for every application (RUNNING when empty).
	appStatus string
	// down makes every dashboard call fail as an unreachable head does.
	down bool
}

func newFakeRay() *fakeRay {
	return &fakeRay{heads: map[string]*fakeHead{}, proxyDown: map[string]bool{}}
}

func (f *fakeRay) head(svc string) *fakeHead {
	h := f.heads[svc]
	if h == nil {
		h = &fakeHead{}
		f.heads[svc] = h
	}
	return h
}

// with runs fn on the head of cluster under the lock.
func (f *fakeRay) with(cluster string, fn func(h *fakeHead)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.head(cluster + "-head-svc"))
}

func (f *fakeRay) deploys(cluster string) (n int, config string) {
	f.with(cluster, func(h *fakeHead) { n, config = h.deploys, h.config })
	return n, config
}

func (f *fakeRay) setProxyDown(pod string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.proxyDown[pod] = down
}

func (f *fakeRay) DashboardFor(t ray.Target) (ray.Dashboard, error) {
	return &fakeDashboard{f: f, svc: t.HeadServiceName}, nil
}

func (f *fakeRay) ServeProxyFor(t ray.Target) (ray.ServeProxy, error) {
	if t.HeadPodName == "" || t.HeadPodIP == "" {
		return nil, fmt.Errorf("fake proxy: pod name and IP are required")
	}
	return &fakeProxy{f: f, pod: t.HeadPodName}, nil
}

func (f *fakeRay) InClusterDashboardURL(t ray.Target) string { return "http://" + t.HeadServiceName }

type fakeDashboard struct {
	ray.Dashboard // the Jobs API is not used by the RayService controller: calling it panics
	f             *fakeRay
	svc           string
}

func (d *fakeDashboard) Endpoint() string { return "fake://" + d.svc }

func (d *fakeDashboard) DeployServeConfigV2(_ context.Context, config string) error {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	h := d.f.head(d.svc)
	if h.down {
		return fmt.Errorf("fake head %s: %w", d.svc, ray.ErrUnavailable)
	}
	if _, err := ray.ServeConfigToJSON(config); err != nil {
		return err
	}
	h.deploys++
	h.config = config
	h.apps = appNames(config)
	return nil
}

func (d *fakeDashboard) GetServeDetails(context.Context) (*ray.ServeDetails, error) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	h := d.f.head(d.svc)
	h.details++
	if h.down {
		return nil, fmt.Errorf("fake head %s: %w", d.svc, ray.ErrUnavailable)
	}
	status := h.appStatus
	if status == "" {
		status = ray.ApplicationStatusRunning
	}
	out := &ray.ServeDetails{Applications: map[string]ray.ServeApplication{}}
	for _, a := range h.apps {
		dep := ray.DeploymentStatusHealthy
		if status != ray.ApplicationStatusRunning {
			dep = ray.DeploymentStatusUnhealthy
		}
		out.Applications[a] = ray.ServeApplication{Name: a, Status: status, Deployments: map[string]ray.ServeDeployment{
			strings.ToUpper(a[:1]) + a[1:]: {Status: dep},
		}}
	}
	return out, nil
}

func (d *fakeDashboard) CheckGCSHealth(context.Context) error { return nil }

type fakeProxy struct {
	f   *fakeRay
	pod string
}

func (p *fakeProxy) Endpoint() string { return "fake://" + p.pod }

func (p *fakeProxy) CheckHealth(context.Context) error {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	if p.f.proxyDown[p.pod] {
		return fmt.Errorf("fake proxy %s: %w", p.pod, ray.ErrUnavailable)
	}
	return nil
}

// appNames are the application names of a serveConfigV2 ("default" when an application has none), as Serve reports
// them.
func appNames(config string) []string {
	var cfg struct {
		Applications []struct {
			Name string `json:"name"`
		} `json:"applications"`
	}
	if err := yaml.Unmarshal([]byte(config), &cfg); err != nil {
		return nil
	}
	out := make([]string, 0, len(cfg.Applications))
	for _, a := range cfg.Applications {
		if a.Name == "" {
			a.Name = "default"
		}
		out = append(out, a.Name)
	}
	return out
}
