package ray

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// Terminal states of Ray's state API (ray.util.state): an actor that is not DEAD and a task that is neither
// FINISHED nor FAILED still holds, or waits for, the cluster's resources.
const (
	ActorStateDead     = "DEAD"
	TaskStateFinished  = "FINISHED"
	TaskStateFailed    = "FAILED"
	stateAPIListPrefix = "/api/v0/"
)

// stateList is the envelope of a state API list answer (rest_response around a ListApiResponse):
// {"result": true, "msg": "", "data": {"result": {"total": …, "num_filtered": …, "result": [...]}}}.
type stateList struct {
	Result bool   `json:"result"`
	Msg    string `json:"msg"`
	Data   struct {
		Result struct {
			Total       int              `json:"total"`
			NumFiltered int              `json:"num_filtered"`
			Result      []map[string]any `json:"result"`
		} `json:"result"`
	} `json:"data"`
}

// CountLiveActors returns how many actors are not DEAD (alive, pending creation, restarting; detached or not).
func (c *DashboardClient) CountLiveActors(ctx context.Context) (int, error) {
	return c.countState(ctx, "actors", []stateFilter{{"state", "!=", ActorStateDead}})
}

// CountActiveTasks returns how many tasks are neither FINISHED nor FAILED (pending or running).
func (c *DashboardClient) CountActiveTasks(ctx context.Context) (int, error) {
	return c.countState(ctx, "tasks", []stateFilter{{"state", "!=", TaskStateFinished}, {"state", "!=", TaskStateFailed}})
}

// NodeStateAlive is a live node's state in Ray's state API.
const NodeStateAlive = "ALIVE"

// HeadNodeAlive says whether the GCS lists the head node ALIVE. The dashboard answers, and its GCS is healthy,
// before the head's raylet has registered: Ray's job manager pins a job's supervisor to the head node's ID, which
// the GCS holds from the start (NodeAffinity, not soft), so a job submitted in between fails ("The node specified
// via NodeAffinitySchedulingStrategy doesn't exist any more or is infeasible").
func (c *DashboardClient) HeadNodeAlive(ctx context.Context) (bool, error) {
	n, err := c.countState(ctx, "nodes", []stateFilter{{"is_head_node", "=", "true"}, {"state", "=", NodeStateAlive}})
	return n > 0, err
}

// stateFilter is one filter of a state API list: key, predicate ("=" or "!="), value.
type stateFilter [3]string

// countState asks for one entry of a state API list whose entries match every filter and returns num_filtered,
// the number that matched: Ray filters before it truncates to limit, so the answer stays one entry long however
// many match.
func (c *DashboardClient) countState(ctx context.Context, resource string, filters []stateFilter) (int, error) {
	path := stateAPIListPrefix + resource
	q := url.Values{"limit": {"1"}, "detail": {"false"}}
	for _, f := range filters {
		q.Add("filter_keys", f[0])
		q.Add("filter_predicates", f[1])
		q.Add("filter_values", f[2])
	}
	raw, err := c.call(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", resource, err)
	}
	var out stateList
	if err := decode(http.MethodGet, path, raw, &out); err != nil {
		return 0, fmt.Errorf("list %s: %w", resource, err)
	}
	if !out.Result {
		return 0, fmt.Errorf("list %s: ray answered result=false: %s", resource, out.Msg)
	}
	n := out.Data.Result.NumFiltered
	if l := len(out.Data.Result.Result); l > n {
		n = l
	}
	return n, nil
}
