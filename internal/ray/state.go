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
	return c.countState(ctx, "actors", [][2]string{{"state", ActorStateDead}})
}

// CountActiveTasks returns how many tasks are neither FINISHED nor FAILED (pending or running).
func (c *DashboardClient) CountActiveTasks(ctx context.Context) (int, error) {
	return c.countState(ctx, "tasks", [][2]string{{"state", TaskStateFinished}, {"state", TaskStateFailed}})
}

// countState asks for one entry of a state API list whose entries differ from every (key, value) in notEqual
// and returns num_filtered, the number that matched: Ray filters before it truncates to limit, so the answer
// stays one entry long however many match.
func (c *DashboardClient) countState(ctx context.Context, resource string, notEqual [][2]string) (int, error) {
	path := stateAPIListPrefix + resource
	q := url.Values{"limit": {"1"}, "detail": {"false"}}
	for _, kv := range notEqual {
		q.Add("filter_keys", kv[0])
		q.Add("filter_predicates", "!=")
		q.Add("filter_values", kv[1])
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
