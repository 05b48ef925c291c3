package ray

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// actorsAnswer is GET /api/v0/actors?limit=1&detail=false&filter_keys=state&filter_predicates=!%3D&filter_values=DEAD
// as Ray 2.52's dashboard writes it (rest_response(convert_google_style=False) around an asdict(ListApiResponse)) for a
// head holding three live actors, the fields of one ActorState entry as protobuf_message_to_dict writes them.
const actorsAnswer = `{"result": true, "msg": "", "data": {"result": {"total": 4, "num_after_truncation": 4, "num_filtered": 3,
 "result": [{"actor_id": "0c5e2f2d4b1a9f0f3c8e0a2b01000000", "class_name": "Keeper", "state": "ALIVE",
  "job_id": "01000000", "name": "keeper", "node_id": "6f0d5e3c", "pid": 4242, "ray_namespace": "idle",
  "serialized_runtime_env": "{}", "required_resources": {}, "death_cause": null, "is_detached": true,
  "placement_group_id": null, "repr_name": "", "call_site": null, "label_selector": {}}],
 "partial_failure_warning": "", "warnings": null}}}`

// tasksAnswer is the tasks list for a head with no pending or running task (all FINISHED).
const tasksAnswer = `{"result": true, "msg": "", "data": {"result": {"total": 12, "num_after_truncation": 12, "num_filtered": 0,
 "result": [], "partial_failure_warning": "", "warnings": null}}}`

func TestCountLiveActorsAndActiveTasks(t *testing.T) {
	var queries []string
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.Path+"?"+r.URL.RawQuery)
		q := r.URL.Query()
		if q.Get("limit") != "1" || len(q["filter_keys"]) != len(q["filter_values"]) || len(q["filter_keys"]) != len(q["filter_predicates"]) {
			http.Error(w, "bad filters", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v0/actors":
			if !slices.Equal(q["filter_values"], []string{"DEAD"}) || !slices.Equal(q["filter_predicates"], []string{"!="}) {
				http.Error(w, "unexpected actor filter", http.StatusBadRequest)
				return
			}
			_, _ = w.Write([]byte(actorsAnswer))
		case "/api/v0/tasks":
			if !slices.Equal(q["filter_values"], []string{"FINISHED", "FAILED"}) || !slices.Equal(q["filter_keys"], []string{"state", "state"}) {
				http.Error(w, "unexpected task filter", http.StatusBadRequest)
				return
			}
			_, _ = w.Write([]byte(tasksAnswer))
		default:
			http.NotFound(w, r)
		}
	})
	ctx := context.Background()
	if n, err := c.CountLiveActors(ctx); err != nil || n != 3 {
		t.Fatalf("CountLiveActors = %d, %v; want 3 (num_filtered)", n, err)
	}
	if n, err := c.CountActiveTasks(ctx); err != nil || n != 0 {
		t.Fatalf("CountActiveTasks = %d, %v; want 0", n, err)
	}
	if len(queries) != 2 {
		t.Fatalf("requests: %v", queries)
	}
}

// TestStateListRefused: Ray answers a bad filter or an unreachable GCS with result=false (400 or 500); a 200 with
// result=false is an error too, never a count of zero that would make a cluster look idle.
func TestStateListRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int
		body string
		want string
	}{
		{"gcs unavailable", http.StatusInternalServerError, `{"result": false, "msg": "Failed to query the data source", "data": {"result": null}}`, "500"},
		{"result false", http.StatusOK, `{"result": false, "msg": "partial", "data": {"result": null}}`, "result=false: partial"},
		{"not json", http.StatusOK, `<html>`, "list actors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.code)
				_, _ = w.Write([]byte(tc.body))
			})
			n, err := c.CountLiveActors(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CountLiveActors = %d, %v; want an error containing %q", n, err, tc.want)
			}
		})
	}
}
