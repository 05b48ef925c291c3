package main

import (
	"context"
	"fmt"
	"net"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/manta-dev/manta/internal/apiserver"
)

func newAPIServerCommand() *cobra.Command {
	var (
		listen          string
		auth            string
		fieldValidation string
		opts            apiserver.Options
	)
	cmd := &cobra.Command{
		Use:   "apiserver",
		Short: "Serve the REST API (KubeRay API server v1 paths) for compute templates, clusters, jobs, services and image pull jobs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Auth = apiserver.AuthMode(auth)
			opts.FieldValidation = apiserver.FieldValidation(fieldValidation)
			// Refuse an unsafe setup before reaching for Kubernetes.
			if (opts.TLSCertFile == "") != (opts.TLSKeyFile == "") {
				return fmt.Errorf("--tls-cert-file and --tls-key-file go together: give both or neither")
			}
			if opts.MaxRequestsInflight < 1 {
				return fmt.Errorf("--max-requests-inflight %d: must be at least 1", opts.MaxRequestsInflight)
			}
			if err := apiserver.CheckCORSOrigin(opts.CORSAllowOrigin); err != nil {
				return err
			}
			if err := apiserver.CheckServing(listen, opts); err != nil {
				return err
			}
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return err
			}
			log := ctrl.Log.WithName("apiserver")
			opts.Log = log
			s, err := apiserver.New(cfg, opts)
			if err != nil {
				return err
			}
			log.Info("serving", "listen", listen, "auth", opts.Auth, "tls", opts.TLSCertFile != "")
			return s.ListenAndServe(cmd.Context(), listen)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&listen, "listen", ":8888", "address to serve on")
	fs.StringVar(&auth, "auth", string(apiserver.AuthKubernetes), "kubernetes: authenticate bearer tokens with TokenReview and authorise with SubjectAccessReview; none: no checks (development only, loopback --listen only)")
	fs.StringVar(&opts.TLSCertFile, "tls-cert-file", "", "PEM certificate (chain) to serve HTTPS with (TLS 1.2 or later); read again when it changes. Needs --tls-key-file")
	fs.StringVar(&opts.TLSKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.BoolVar(&opts.InsecureHTTP, "insecure-http", false, "allow plain HTTP on a non-loopback --listen address (callers' bearer tokens cross the network in the clear); for a TLS-terminating proxy or service mesh in front")
	fs.IntVar(&opts.MaxRequestsInflight, "max-requests-inflight", apiserver.DefaultMaxRequestsInflight, "requests handled at once; more are answered 429 with Retry-After (/healthz and /metrics are not counted)")
	fs.StringVar(&fieldValidation, "field-validation", string(apiserver.FieldValidationWarn), "unknown fields in request bodies: Warn accepts the request with a Warning header per field (requests may ask for ?fieldValidation=Strict); Strict refuses them with a 400, for every request")
	fs.BoolVar(&opts.UseKubernetesProxy, "use-kubernetes-proxy", false, "reach Ray dashboards through the Kubernetes API server's services/proxy")
	fs.StringVar(&opts.ClusterDomain, "cluster-domain", "cluster.local", "cluster DNS domain used to reach Ray head services directly")
	fs.StringVar(&opts.CORSAllowOrigin, "cors-allow-origin", "", "let browser pages from this origin call the API (Access-Control-Allow-Origin, as KubeRay's API server): scheme://host[:port], one * inside it as a wildcard, or * for every origin; empty: no CORS")
	fs.StringVar(&opts.AnonymousAs, "anonymous-as", "", "<namespace>:<serviceaccount>: requests without an Authorization header (KubeRay's dashboard, Ray dashboard links) act as this ServiceAccount, with its RBAC; needs auth kubernetes, loopback --listen or --tls-cert-file, and create on that ServiceAccount's serviceaccounts/token for this server; empty: such requests get 401")
	return cmd
}

// startDevAPIServer runs the API server for `manta dev` on a free loopback port with Kubernetes auth, and
// creates the manta-dev-user ServiceAccount whose tokens callers use.
func startDevAPIServer(ctx context.Context, cfg *rest.Config, ready chan<- string) error {
	if err := apiserver.EnsureDevUser(ctx, cfg); err != nil {
		return err
	}
	// The dev cluster's pods are fake (kwok), so dashboards are only reachable through the API server proxy.
	s, err := apiserver.New(cfg, apiserver.Options{Auth: apiserver.AuthKubernetes, UseKubernetesProxy: true, Log: ctrl.Log.WithName("apiserver")})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	url := "http://" + ln.Addr().String()
	ready <- fmt.Sprintf("REST API: %s  (TOKEN=$(kubectl create token %s -n %s); curl -H \"Authorization: Bearer $TOKEN\" %s/apis/v1/namespaces/default/clusters)\n"+
		"  Console: %s/console/  (sign in with the token of kubectl create token %s -n %s)",
		url, apiserver.DevUser, apiserver.DevUserNamespace, url, url, apiserver.DevUser, apiserver.DevUserNamespace)
	return s.Serve(ctx, ln)
}
