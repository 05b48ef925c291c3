package ray

import (
	"context"
)

// Dashboard is what controllers call on a Ray head's dashboard. *DashboardClient implements it; tests wrap it to
// inject faults (timeouts, 5xx, a submit that times out after Ray accepted it).
type Dashboard interface {
	Endpoint() string
	SubmitJob(ctx context.Context, req JobSubmitRequest) (string, error)
	GetJob(ctx context.Context, id string) (*JobInfo, error)
	ListJobs(ctx context.Context) ([]JobInfo, error)
	GetJobLogs(ctx context.Context, id string) (string, error)
	StopJob(ctx context.Context, id string) (bool, error)
	DeleteJob(ctx context.Context, id string) (bool, error)
	CheckGCSHealth(ctx context.Context) error
	DeployServeConfigV2(ctx context.Context, serveConfigV2 string) error
	GetServeDetails(ctx context.Context) (*ServeDetails, error)
	DeleteServeApplications(ctx context.Context) error
	// CountLiveActors and CountActiveTasks read Ray's state API (/api/v0/actors, /api/v0/tasks).
	CountLiveActors(ctx context.Context) (int, error)
	CountActiveTasks(ctx context.Context) (int, error)
	// HeadNodeAlive reads the state API's nodes (/api/v0/nodes): is the head's raylet registered and alive.
	HeadNodeAlive(ctx context.Context) (bool, error)
}

// ServeProxy is what controllers call on a Serve HTTP proxy. *ServeProxyClient implements it.
type ServeProxy interface {
	Endpoint() string
	CheckHealth(ctx context.Context) error
}

// ClientFactory builds the clients controllers use for one head. *Factory implements it, honouring
// --use-kubernetes-proxy; tests inject their own.
type ClientFactory interface {
	DashboardFor(t Target) (Dashboard, error)
	ServeProxyFor(t Target) (ServeProxy, error)
	// InClusterDashboardURL is the dashboard address a pod inside the cluster uses (the K8sJobMode submitter),
	// "http://<svc>.<ns>.svc.<domain>:<port>": pods reach Services directly whichever way the operator does.
	InClusterDashboardURL(t Target) string
}

var (
	_ Dashboard     = (*DashboardClient)(nil)
	_ ServeProxy    = (*ServeProxyClient)(nil)
	_ ClientFactory = (*Factory)(nil)
)

// DashboardFor is Dashboard behind the Dashboard interface.
func (f *Factory) DashboardFor(t Target) (Dashboard, error) {
	c, err := f.Dashboard(t)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// ServeProxyFor is ServeProxy behind the ServeProxy interface.
func (f *Factory) ServeProxyFor(t Target) (ServeProxy, error) {
	c, err := f.ServeProxy(t)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// InClusterDashboardURL implements ClientFactory. A target whose names are not valid gives "" (a submitter pod
// with no address fails instead of dialling a host chosen by the names); controllers validate their objects first.
func (f *Factory) InClusterDashboardURL(t Target) string {
	if t.checkDashboard() != nil {
		return ""
	}
	return f.dashboardURL(t).String()
}

// UsesKubernetesProxy reports whether clients go through the API server's proxy.
func (f *Factory) UsesKubernetesProxy() bool { return f.opts.UseKubernetesProxy }
