package fakeray

import (
	"net/http"
	"strconv"
)

// stateAPI is what the head's state API (/api/v0/actors, /api/v0/tasks, /api/v0/nodes) lists: one state per actor
// or task, and whether the head node is registered yet (headPending; the head is then not listed).
type stateAPI struct {
	actors, tasks []string
	headPending   bool
	reads         int
}

// SetHeadNodePending makes the state API list no head node (pending true), as Ray's does between its dashboard
// starting to answer and the head's raylet registering; false lists it ALIVE again (the default).
func (h *Head) SetHeadNodePending(pending bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state.headPending = pending
}

// serveNodes answers /api/v0/nodes as Ray 2.52 does: the head node ALIVE (unless SetHeadNodePending), filtered by
// is_head_node and state (= or !=, all of them must hold).
func (h *Head) serveNodes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	keys, preds, vals := q["filter_keys"], q["filter_predicates"], q["filter_values"]
	if len(keys) != len(vals) || len(keys) != len(preds) {
		traceback(w, "AssertionError")
		return
	}
	h.mu.Lock()
	h.state.reads++
	pending := h.state.headPending
	h.mu.Unlock()
	var all []map[string]any
	if !pending {
		all = append(all, map[string]any{"node_id": "head", "is_head_node": true, "state": "ALIVE"})
	}
	matched := []map[string]any{}
	for _, n := range all {
		ok := true
		for j, k := range keys {
			var v string
			switch k {
			case "is_head_node":
				v = strconv.FormatBool(n["is_head_node"].(bool))
				if b, err := strconv.ParseBool(vals[j]); err == nil {
					vals[j] = strconv.FormatBool(b)
				}
			case "state":
				v = n["state"].(string)
			default:
				traceback(w, "ValueError: unsupported filter key "+k)
				return
			}
			if (preds[j] == "=") != (v == vals[j]) {
				ok = false
			}
		}
		if ok {
			matched = append(matched, n)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"result": true, "msg": "", "data": map[string]any{"result": map[string]any{
		"total": len(all), "num_after_truncation": len(all), "num_filtered": len(matched), "result": matched,
		"partial_failure_warning": "", "warnings": nil,
	}}})
}

// SetActors makes the state API list one actor per state given ("ALIVE", "DEAD", ...).
func (h *Head) SetActors(states ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state.actors = append([]string(nil), states...)
}

// SetTasks makes the state API list one task per state given ("RUNNING", "FINISHED", ...).
func (h *Head) SetTasks(states ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state.tasks = append([]string(nil), states...)
}

// StateReads is how many state API lists were answered.
func (h *Head) StateReads() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state.reads
}

// serveStateList answers a state API list as Ray 2.52 does (rest_response around ListApiResponse): the filters
// (state with = or !=, all of them must hold) apply before limit, and num_filtered counts what matched.
func (h *Head) serveStateList(list func(*stateAPI) []string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		keys, preds, vals := q["filter_keys"], q["filter_predicates"], q["filter_values"]
		if len(keys) != len(vals) || len(keys) != len(preds) {
			traceback(w, "AssertionError")
			return
		}
		limit := 100
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				traceback(w, "ValueError: invalid literal for int() with base 10: '"+v+"'")
				return
			}
			limit = n
		}
		h.mu.Lock()
		h.state.reads++
		all := append([]string(nil), list(&h.state)...)
		h.mu.Unlock()
		matched := []map[string]any{}
		for i, s := range all {
			ok := true
			for j, k := range keys {
				if k != "state" || (preds[j] == "=") != (s == vals[j]) {
					ok = false
				}
			}
			if ok {
				matched = append(matched, map[string]any{"state": s, "id": strconv.Itoa(i)})
			}
		}
		result := matched
		if len(result) > limit {
			result = result[:limit]
		}
		writeJSON(w, http.StatusOK, map[string]any{"result": true, "msg": "", "data": map[string]any{"result": map[string]any{
			"total": len(all), "num_after_truncation": len(all), "num_filtered": len(matched), "result": result,
			"partial_failure_warning": "", "warnings": nil,
		}}})
	}
}
