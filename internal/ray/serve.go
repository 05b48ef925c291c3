package ray

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"sigs.k8s.io/yaml"
)

// Serve application statuses (ApplicationStatus in ray.serve).
const (
	ApplicationStatusNotStarted   = "NOT_STARTED"
	ApplicationStatusDeploying    = "DEPLOYING"
	ApplicationStatusDeployFailed = "DEPLOY_FAILED"
	ApplicationStatusRunning      = "RUNNING"
	ApplicationStatusUnhealthy    = "UNHEALTHY"
	ApplicationStatusDeleting     = "DELETING"
)

// Serve deployment statuses (DeploymentStatus in ray.serve).
const (
	DeploymentStatusUpdating     = "UPDATING"
	DeploymentStatusHealthy      = "HEALTHY"
	DeploymentStatusUnhealthy    = "UNHEALTHY"
	DeploymentStatusDeployFailed = "DEPLOY_FAILED"
	DeploymentStatusUpscaling    = "UPSCALING"
	DeploymentStatusDownscaling  = "DOWNSCALING"
)

// ServeDetails is the answer of GET /api/serve/applications/?api_type=declarative (ServeInstanceDetails), reduced to
// what the operator reads. Applications is keyed by application name.
type ServeDetails struct {
	ProxyLocation  string                       `json:"proxy_location"`
	DeployMode     string                       `json:"deploy_mode"`
	HTTPOptions    *ServeHTTPOptions            `json:"http_options"`
	Proxies        map[string]ServeProxyDetails `json:"proxies"`
	Applications   map[string]ServeApplication  `json:"applications"`
	TargetCapacity *float64                     `json:"target_capacity"`
	ControllerInfo map[string]json.RawMessage   `json:"controller_info"`
}

// ServeHTTPOptions are the Serve HTTP proxy's options.
type ServeHTTPOptions struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

// ServeProxyDetails describes one Serve HTTP proxy actor.
type ServeProxyDetails struct {
	NodeID string `json:"node_id"`
	NodeIP string `json:"node_ip"`
	Status string `json:"status"`
}

// ServeApplication is one application's status (ApplicationDetails).
type ServeApplication struct {
	Name              string                     `json:"name"`
	RoutePrefix       string                     `json:"route_prefix"`
	DocsPath          string                     `json:"docs_path"`
	Status            string                     `json:"status"`
	Message           string                     `json:"message"`
	LastDeployedTimeS float64                    `json:"last_deployed_time_s"`
	Source            string                     `json:"source"`
	DeployedAppConfig json.RawMessage            `json:"deployed_app_config,omitempty"`
	Deployments       map[string]ServeDeployment `json:"deployments"`
}

// ServeDeployment is one deployment's status (DeploymentDetails).
type ServeDeployment struct {
	Name              string         `json:"name"`
	Status            string         `json:"status"`
	StatusTrigger     string         `json:"status_trigger"`
	Message           string         `json:"message"`
	TargetNumReplicas int            `json:"target_num_replicas"`
	Replicas          []ServeReplica `json:"replicas"`
}

// ServeReplica is one replica of a deployment.
type ServeReplica struct {
	ReplicaID string `json:"replica_id"`
	State     string `json:"state"`
	NodeID    string `json:"node_id"`
	NodeIP    string `json:"node_ip"`
}

// ServeConfigToJSON converts a RayService's serveConfigV2 (YAML, a ServeDeploySchema) into the JSON body of
// PUT /api/serve/applications/.
func ServeConfigToJSON(serveConfigV2 string) ([]byte, error) {
	if serveConfigV2 == "" {
		return nil, errors.New("serveConfigV2 is empty")
	}
	b, err := yaml.YAMLToJSON([]byte(serveConfigV2))
	if err != nil {
		return nil, fmt.Errorf("serveConfigV2: %w", err)
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, fmt.Errorf("serveConfigV2 is not a YAML mapping: %w", err)
	}
	return b, nil
}

// DeployServeApplications declaratively deploys the Serve applications in config (JSON of a ServeDeploySchema):
// applications not listed are removed. Ray validates asynchronously; read the outcome with GetServeDetails.
func (c *DashboardClient) DeployServeApplications(ctx context.Context, config []byte) error {
	if !json.Valid(config) {
		return errors.New("deploy serve applications: config is not valid JSON")
	}
	if _, err := c.call(ctx, http.MethodPut, "/api/serve/applications/", nil, json.RawMessage(config)); err != nil {
		return fmt.Errorf("deploy serve applications: %w", err)
	}
	return nil
}

// DeployServeConfigV2 converts serveConfigV2 YAML to JSON and deploys it.
func (c *DashboardClient) DeployServeConfigV2(ctx context.Context, serveConfigV2 string) error {
	b, err := ServeConfigToJSON(serveConfigV2)
	if err != nil {
		return fmt.Errorf("deploy serve applications: %w", err)
	}
	return c.DeployServeApplications(ctx, b)
}

// GetServeDetails returns the status of the declaratively deployed Serve applications and their deployments.
// When Serve is not running, Applications is empty.
func (c *DashboardClient) GetServeDetails(ctx context.Context) (*ServeDetails, error) {
	const path = "/api/serve/applications/"
	raw, err := c.call(ctx, http.MethodGet, path, url.Values{"api_type": {"declarative"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("get serve details: %w", err)
	}
	var d ServeDetails
	if err := decode(http.MethodGet, path, raw, &d); err != nil {
		return nil, fmt.Errorf("get serve details: %w", err)
	}
	return &d, nil
}

// DeleteServeApplications shuts Serve down, removing every application.
func (c *DashboardClient) DeleteServeApplications(ctx context.Context) error {
	if _, err := c.call(ctx, http.MethodDelete, "/api/serve/applications/", nil, nil); err != nil {
		return fmt.Errorf("delete serve applications: %w", err)
	}
	return nil
}
