package ray

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
)

const (
	// DefaultDashboardPort is the Ray dashboard's port when the head Service does not name another.
	DefaultDashboardPort int32 = 8265
	// DefaultServePort is the Serve HTTP proxy's port.
	DefaultServePort int32 = 8000
	// DashboardPortName names the head Service port of the dashboard; the service proxy path uses it.
	DashboardPortName = "dashboard"
	// DefaultClusterDomain is the cluster DNS domain used when Options.ClusterDomain is empty.
	DefaultClusterDomain = "cluster.local"
)

// DashboardPort returns the port of the head Service's port named "dashboard", or DefaultDashboardPort when the
// Service is nil or has no such port.
func DashboardPort(svc *corev1.Service) int32 {
	if svc != nil {
		for _, p := range svc.Spec.Ports {
			if p.Name == DashboardPortName && p.Port > 0 {
				return p.Port
			}
		}
	}
	return DefaultDashboardPort
}

// Options choose how the operator reaches Ray heads.
type Options struct {
	// UseKubernetesProxy sends requests through the Kubernetes API server's services/proxy and pods/proxy
	// subresources (--use-kubernetes-proxy) instead of straight to the head.
	UseKubernetesProxy bool
	// RESTConfig is the operator's API server config; required when UseKubernetesProxy.
	RESTConfig *rest.Config
	// ClusterDomain is the cluster DNS domain for direct Service URLs; default DefaultClusterDomain.
	ClusterDomain string
	// Timeout bounds each call; default DefaultDirectTimeout, or DefaultProxyTimeout through the proxy.
	Timeout time.Duration
	// HTTPClient is used by the direct transport; default a shared client that ignores HTTP(S)_PROXY.
	HTTPClient *http.Client
}

// Target names a Ray cluster's head.
type Target struct {
	Namespace       string
	HeadServiceName string
	// HeadPodName is needed for Serve health through the proxy.
	HeadPodName string
	// HeadPodIP is needed for direct Serve health.
	HeadPodIP string
	// DashboardPort defaults to DefaultDashboardPort (see DashboardPort).
	DashboardPort int32
	// ServePort defaults to DefaultServePort.
	ServePort int32
	// AuthToken, when set, is sent to the dashboard as "x-ray-authorization: Bearer <token>".
	AuthToken string
}

// Factory builds Ray clients for heads. It is safe for concurrent use.
type Factory struct {
	opts Options
	// proxyHTTP carries the API server credentials; directHTTP carries none. Both refuse redirects and are shared
	// by every client the factory makes, so connections are reused.
	proxyHTTP, directHTTP *http.Client
}

// ErrInvalidTarget means a Target names something that cannot be a Kubernetes object or address (a head Service name
// such as "10.0.0.1?" that would change the host of the URL built from it). Names come from objects tenants
// write, including status fields, so the factory checks them whatever the callers checked.
var ErrInvalidTarget = errors.New("invalid ray target")

// NewFactory validates opts and prepares the shared HTTP clients.
func NewFactory(opts Options) (*Factory, error) {
	f := &Factory{opts: opts}
	if f.opts.ClusterDomain == "" {
		f.opts.ClusterDomain = DefaultClusterDomain
	}
	if errs := validation.IsDNS1123Subdomain(strings.TrimSuffix(f.opts.ClusterDomain, ".")); len(errs) > 0 {
		return nil, fmt.Errorf("ray client: cluster domain %q: %s", f.opts.ClusterDomain, strings.Join(errs, "; "))
	}
	if opts.UseKubernetesProxy {
		if opts.RESTConfig == nil {
			return nil, errors.New("ray client: UseKubernetesProxy needs a RESTConfig")
		}
		c, err := rest.HTTPClientFor(opts.RESTConfig)
		if err != nil {
			return nil, fmt.Errorf("ray client: %w", err)
		}
		f.proxyHTTP = withoutRedirects(c)
		if f.opts.Timeout <= 0 {
			f.opts.Timeout = DefaultProxyTimeout
		}
	}
	f.directHTTP = defaultDirectClient
	if opts.HTTPClient != nil {
		f.directHTTP = withoutRedirects(opts.HTTPClient)
	}
	if f.opts.Timeout <= 0 {
		f.opts.Timeout = DefaultDirectTimeout
	}
	return f, nil
}

func invalidTarget(what, value string, errs []string) error {
	return fmt.Errorf("%w: %s %q: %s", ErrInvalidTarget, what, value, strings.Join(errs, "; "))
}

func checkNamespace(ns string) error {
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return invalidTarget("namespace", ns, errs)
	}
	return nil
}

func checkPort(what string, p int32) error {
	if p < 0 || p > 65535 {
		return invalidTarget(what, strconv.Itoa(int(p)), []string{"must be between 1 and 65535"})
	}
	return nil
}

// CheckHeadServiceName refuses a head Service name that is not a DNS-1035 label, as Kubernetes requires of
// Service names: the name becomes a host name (direct) or a path segment (through the API server).
func CheckHeadServiceName(name string) error {
	if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
		return invalidTarget("head service name", name, errs)
	}
	return nil
}

func (t Target) dashboardPort() int32 {
	if t.DashboardPort == 0 {
		return DefaultDashboardPort
	}
	return t.DashboardPort
}

func (t Target) servePort() int32 {
	if t.ServePort == 0 {
		return DefaultServePort
	}
	return t.ServePort
}

// checkDashboard validates what a dashboard URL is built from.
func (t Target) checkDashboard() error {
	if t.Namespace == "" || t.HeadServiceName == "" {
		return fmt.Errorf("%w: namespace and head service name are required", ErrInvalidTarget)
	}
	return errors.Join(checkNamespace(t.Namespace), CheckHeadServiceName(t.HeadServiceName), checkPort("dashboard port", t.DashboardPort))
}

// dashboardURL is http://<svc>.<ns>.svc.<domain>:<port> of a checked target.
func (f *Factory) dashboardURL(t Target) *url.URL {
	host := t.HeadServiceName + "." + t.Namespace + ".svc." + f.opts.ClusterDomain
	return &url.URL{Scheme: "http", Host: net.JoinHostPort(host, strconv.Itoa(int(t.dashboardPort())))}
}

// Dashboard returns a client for the head's dashboard.
func (f *Factory) Dashboard(t Target) (*DashboardClient, error) {
	if err := t.checkDashboard(); err != nil {
		return nil, fmt.Errorf("ray dashboard client: %w", err)
	}
	var tr Transport
	var err error
	if f.opts.UseKubernetesProxy {
		tr, err = f.proxyTransport(ServiceProxyPath(t.Namespace, t.HeadServiceName, DashboardPortName))
	} else {
		tr = &DirectTransport{base: f.dashboardURL(t), client: f.directHTTP}
	}
	if err != nil {
		return nil, err
	}
	return NewDashboardClient(tr, WithTimeout(f.opts.Timeout), WithAuthToken(t.AuthToken)), nil
}

// ServeProxy returns a client for the Serve HTTP proxy on the head pod.
func (f *Factory) ServeProxy(t Target) (*ServeProxyClient, error) {
	if err := checkPort("serve port", t.ServePort); err != nil {
		return nil, fmt.Errorf("ray serve proxy client: %w", err)
	}
	port := strconv.Itoa(int(t.servePort()))
	var tr Transport
	var err error
	if f.opts.UseKubernetesProxy {
		if t.Namespace == "" || t.HeadPodName == "" {
			return nil, fmt.Errorf("ray serve proxy client: %w: namespace and head pod name are required", ErrInvalidTarget)
		}
		err = checkNamespace(t.Namespace)
		if errs := validation.IsDNS1123Subdomain(t.HeadPodName); len(errs) > 0 {
			err = errors.Join(err, invalidTarget("head pod name", t.HeadPodName, errs))
		}
		if err != nil {
			return nil, fmt.Errorf("ray serve proxy client: %w", err)
		}
		tr, err = f.proxyTransport(PodProxyPath(t.Namespace, t.HeadPodName, port))
	} else {
		if t.HeadPodIP == "" {
			return nil, fmt.Errorf("ray serve proxy client: %w: head pod IP is required", ErrInvalidTarget)
		}
		ip, perr := netip.ParseAddr(t.HeadPodIP)
		if perr != nil || ip.Zone() != "" {
			return nil, fmt.Errorf("ray serve proxy client: %w", invalidTarget("head pod IP", t.HeadPodIP, []string{"must be an IP address"}))
		}
		tr = &DirectTransport{base: &url.URL{Scheme: "http", Host: net.JoinHostPort(ip.String(), port)}, client: f.directHTTP}
	}
	if err != nil {
		return nil, err
	}
	return NewServeProxyClient(tr, WithTimeout(f.opts.Timeout)), nil
}

func (f *Factory) proxyTransport(path string) (Transport, error) {
	// f.proxyHTTP refuses redirects already; NewProxyTransport's copy of it shares its connections.
	return NewProxyTransport(f.opts.RESTConfig, f.proxyHTTP, path)
}
