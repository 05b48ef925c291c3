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

func init() {
	devServices = append(devServices, devService{name: "apiserver", start: startDevAPIServer})
}

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
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return err
			}
			log := ctrl.Log.WithName("apiserver")
			opts.Auth = apiserver.AuthMode(auth)
			opts.FieldValidation = apiserver.FieldValidation(fieldValidation)
			opts.Log = log
			s, err := apiserver.New(cfg, opts)
			if err != nil {
				return err
			}
			log.Info("serving", "listen", listen, "auth", opts.Auth)
			return s.ListenAndServe(cmd.Context(), listen)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&listen, "listen", ":8888", "address to serve HTTP on")
	fs.StringVar(&auth, "auth", string(apiserver.AuthKubernetes), "kubernetes: authenticate bearer tokens with TokenReview and authorise with SubjectAccessReview; none: no checks (development only)")
	fs.StringVar(&fieldValidation, "field-validation", string(apiserver.FieldValidationWarn), "unknown fields in request bodies: Warn accepts the request with a Warning header per field (requests may ask for ?fieldValidation=Strict); Strict refuses them with a 400, for every request")
	fs.BoolVar(&opts.UseKubernetesProxy, "use-kubernetes-proxy", false, "reach Ray dashboards through the Kubernetes API server's services/proxy")
	fs.StringVar(&opts.ClusterDomain, "cluster-domain", "cluster.local", "cluster DNS domain used to reach Ray head services directly")
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
	ready <- fmt.Sprintf("REST API: %s  (TOKEN=$(kubectl create token %s -n %s); curl -H \"Authorization: Bearer $TOKEN\" %s/apis/v1/namespaces/default/clusters)",
		url, apiserver.DevUser, apiserver.DevUserNamespace, url)
	return s.Serve(ctx, ln)
}
