package ray

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	opts      Options
	proxyHTTP *http.Client
}

// NewFactory validates opts and prepares the shared HTTP clients.
func NewFactory(opts Options) (*Factory, error) {
	f := &Factory{opts: opts}
	if f.opts.ClusterDomain == "" {
		f.opts.ClusterDomain = DefaultClusterDomain
	}
	if opts.UseKubernetesProxy {
		if opts.RESTConfig == nil {
			return nil, errors.New("ray client: UseKubernetesProxy needs a RESTConfig")
		}
		c, err := rest.HTTPClientFor(opts.RESTConfig)
		if err != nil {
			return nil, fmt.Errorf("ray client: %w", err)
		}
		f.proxyHTTP = c
		if f.opts.Timeout <= 0 {
			f.opts.Timeout = DefaultProxyTimeout
		}
	}
	if f.opts.Timeout <= 0 {
		f.opts.Timeout = DefaultDirectTimeout
	}
	return f, nil
}

// Dashboard returns a client for the head's dashboard.
func (f *Factory) Dashboard(t Target) (*DashboardClient, error) {
	if t.Namespace == "" || t.HeadServiceName == "" {
		return nil, errors.New("ray dashboard client: namespace and head service name are required")
	}
	var tr Transport
	var err error
	if f.opts.UseKubernetesProxy {
		tr, err = NewProxyTransport(f.opts.RESTConfig, f.proxyHTTP, ServiceProxyPath(t.Namespace, t.HeadServiceName, DashboardPortName))
	} else {
		port := t.DashboardPort
		if port == 0 {
			port = DefaultDashboardPort
		}
		host := t.HeadServiceName + "." + t.Namespace + ".svc." + f.opts.ClusterDomain
		tr, err = NewDirectTransport("http://"+net.JoinHostPort(host, strconv.Itoa(int(port))), f.opts.HTTPClient)
	}
	if err != nil {
		return nil, err
	}
	return NewDashboardClient(tr, WithTimeout(f.opts.Timeout), WithAuthToken(t.AuthToken)), nil
}

// ServeProxy returns a client for the Serve HTTP proxy on the head pod.
func (f *Factory) ServeProxy(t Target) (*ServeProxyClient, error) {
	port := t.ServePort
	if port == 0 {
		port = DefaultServePort
	}
	var tr Transport
	var err error
	if f.opts.UseKubernetesProxy {
		if t.Namespace == "" || t.HeadPodName == "" {
			return nil, errors.New("ray serve proxy client: namespace and head pod name are required")
		}
		tr, err = NewProxyTransport(f.opts.RESTConfig, f.proxyHTTP, PodProxyPath(t.Namespace, t.HeadPodName, strconv.Itoa(int(port))))
	} else {
		if t.HeadPodIP == "" {
			return nil, errors.New("ray serve proxy client: head pod IP is required")
		}
		tr, err = NewDirectTransport("http://"+net.JoinHostPort(t.HeadPodIP, strconv.Itoa(int(port))), f.opts.HTTPClient)
	}
	if err != nil {
		return nil, err
	}
	return NewServeProxyClient(tr, WithTimeout(f.opts.Timeout)), nil
}
