package ray

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"sigs.k8s.io/yaml"
)

// JobStatus is a Ray job's state.
type JobStatus string

const (
	JobStatusPending   JobStatus = "PENDING"
	JobStatusRunning   JobStatus = "RUNNING"
	JobStatusStopped   JobStatus = "STOPPED"
	JobStatusSucceeded JobStatus = "SUCCEEDED"
	JobStatusFailed    JobStatus = "FAILED"
)

// IsTerminal reports whether the job will not change state again.
func (s JobStatus) IsTerminal() bool {
	return s == JobStatusStopped || s == JobStatusSucceeded || s == JobStatusFailed
}

// JobSubmitRequest is the body of POST /api/jobs/.
type JobSubmitRequest struct {
	Entrypoint string `json:"entrypoint"`
	// SubmissionID makes submission idempotent: a second submission with the same ID fails with ErrAlreadySubmitted.
	SubmissionID        string             `json:"submission_id,omitempty"`
	RuntimeEnv          map[string]any     `json:"runtime_env,omitempty"`
	Metadata            map[string]string  `json:"metadata,omitempty"`
	EntrypointNumCPUs   float64            `json:"entrypoint_num_cpus,omitempty"`
	EntrypointNumGPUs   float64            `json:"entrypoint_num_gpus,omitempty"`
	EntrypointMemory    int64              `json:"entrypoint_memory,omitempty"`
	EntrypointResources map[string]float64 `json:"entrypoint_resources,omitempty"`
}

// DriverInfo describes the driver process of a job.
type DriverInfo struct {
	ID            string `json:"id"`
	NodeIPAddress string `json:"node_ip_address"`
	PID           string `json:"pid"`
}

// JobInfo is what GET /api/jobs/<id> and GET /api/jobs/ return for a job.
type JobInfo struct {
	// Type is "SUBMISSION" for jobs submitted through the Jobs API, "DRIVER" for drivers started otherwise.
	Type         string      `json:"type"`
	JobID        string      `json:"job_id"`
	SubmissionID string      `json:"submission_id"`
	DriverInfo   *DriverInfo `json:"driver_info,omitempty"`
	Status       JobStatus   `json:"status"`
	Entrypoint   string      `json:"entrypoint"`
	Message      string      `json:"message"`
	ErrorType    string      `json:"error_type"`
	// StartTime and EndTime are Unix milliseconds; zero when unset.
	StartTime              int64              `json:"start_time"`
	EndTime                int64              `json:"end_time"`
	Metadata               map[string]string  `json:"metadata"`
	RuntimeEnv             map[string]any     `json:"runtime_env"`
	DriverAgentHTTPAddress string             `json:"driver_agent_http_address"`
	DriverNodeID           string             `json:"driver_node_id"`
	DriverExitCode         *int               `json:"driver_exit_code"`
	EntrypointNumCPUs      float64            `json:"entrypoint_num_cpus"`
	EntrypointNumGPUs      float64            `json:"entrypoint_num_gpus"`
	EntrypointMemory       int64              `json:"entrypoint_memory"`
	EntrypointResources    map[string]float64 `json:"entrypoint_resources"`
}

// SubmitJob submits a job and returns its submission ID. When req.SubmissionID names an existing job the error
// matches ErrAlreadySubmitted and nothing new runs.
func (c *DashboardClient) SubmitJob(ctx context.Context, req JobSubmitRequest) (string, error) {
	if req.Entrypoint == "" {
		return "", errors.New("submit job: entrypoint is empty")
	}
	const path = "/api/jobs/" // Ray's route has the trailing slash.
	raw, err := c.call(ctx, http.MethodPost, path, nil, req)
	if err != nil {
		return "", fmt.Errorf("submit job %q: %w", req.SubmissionID, err)
	}
	var out struct {
		JobID        string `json:"job_id"`
		SubmissionID string `json:"submission_id"`
	}
	if err := decode(http.MethodPost, path, raw, &out); err != nil {
		return "", fmt.Errorf("submit job %q: %w", req.SubmissionID, err)
	}
	if out.SubmissionID == "" {
		// Before submission_id existed, Ray returned the submission ID as job_id.
		out.SubmissionID = out.JobID
	}
	return out.SubmissionID, nil
}

// GetJob returns a job by submission ID (or Ray job ID). A missing job matches ErrNotFound.
func (c *DashboardClient) GetJob(ctx context.Context, id string) (*JobInfo, error) {
	path := "/api/jobs/" + url.PathEscape(id)
	raw, err := c.call(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("get job %q: %w", id, err)
	}
	var info JobInfo
	if err := decode(http.MethodGet, path, raw, &info); err != nil {
		return nil, fmt.Errorf("get job %q: %w", id, err)
	}
	return &info, nil
}

// ListJobs returns every job the head knows, submitted ones and plain drivers.
func (c *DashboardClient) ListJobs(ctx context.Context) ([]JobInfo, error) {
	const path = "/api/jobs/"
	raw, err := c.call(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	var jobs []JobInfo
	if err := decode(http.MethodGet, path, raw, &jobs); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}

// StopJob asks Ray to stop a job. It reports false when the job had already finished.
func (c *DashboardClient) StopJob(ctx context.Context, id string) (bool, error) {
	path := "/api/jobs/" + url.PathEscape(id) + "/stop"
	raw, err := c.call(ctx, http.MethodPost, path, nil, nil)
	if err != nil {
		return false, fmt.Errorf("stop job %q: %w", id, err)
	}
	var out struct {
		Stopped bool `json:"stopped"`
	}
	if err := decode(http.MethodPost, path, raw, &out); err != nil {
		return false, fmt.Errorf("stop job %q: %w", id, err)
	}
	return out.Stopped, nil
}

// DeleteJob deletes a finished job's record and logs. Ray refuses to delete a job that is not in a terminal
// state (Ray 2.52 answers 500 with "non-terminal state"); that matches ErrJobNotTerminal. It reports whether Ray
// deleted it.
func (c *DashboardClient) DeleteJob(ctx context.Context, id string) (bool, error) {
	path := "/api/jobs/" + url.PathEscape(id)
	raw, err := c.call(ctx, http.MethodDelete, path, nil, nil)
	if err != nil {
		return false, fmt.Errorf("delete job %q: %w", id, err)
	}
	var out struct {
		Deleted bool `json:"deleted"`
	}
	if err := decode(http.MethodDelete, path, raw, &out); err != nil {
		return false, fmt.Errorf("delete job %q: %w", id, err)
	}
	return out.Deleted, nil
}

// RuntimeEnvFromYAML parses a RayJob's spec.runtimeEnvYAML into the runtime_env object of a submission.
// An empty string gives nil.
func RuntimeEnvFromYAML(s string) (map[string]any, error) {
	if s == "" {
		return nil, nil
	}
	var env map[string]any
	if err := yaml.Unmarshal([]byte(s), &env); err != nil {
		return nil, fmt.Errorf("runtimeEnvYAML: %w", err)
	}
	return env, nil
}
