package bench

import "testing"

// TestClassify and the tests in sidebyside_unit_test.go are pure and fast, so `go test ./...` stays quick (the
// dev-cluster Tests are in smallscale_test.go).
func TestClassify(t *testing.T) {
	cases := []struct {
		method, path string
		watch        bool
		want         call
	}{
		{"GET", "/api/v1/namespaces/ns/pods", false, call{"list", "pods"}},
		{"GET", "/api/v1/pods", true, call{"watch", "pods"}},
		{"GET", "/api/v1/namespaces/ns/pods/p", false, call{"get", "pods"}},
		{"POST", "/api/v1/namespaces/ns/pods", false, call{"create", "pods"}},
		{"DELETE", "/api/v1/namespaces/ns/pods/p", false, call{"delete", "pods"}},
		{"DELETE", "/api/v1/namespaces/ns/pods", false, call{"deletecollection", "pods"}},
		{"PUT", "/apis/ray.io/v1/namespaces/ns/rayclusters/c/status", false, call{"update", "rayclusters.ray.io/status"}},
		{"PATCH", "/apis/events.k8s.io/v1/namespaces/ns/events/e", false, call{"patch", "events.events.k8s.io"}},
		{"GET", "/api/v1/namespaces/ns", false, call{"get", "namespaces"}},
		{"GET", "/api/v1/nodes", false, call{"list", "nodes"}},
		{"GET", "/apis/manta.dev/v1alpha1", false, call{"get", "discovery"}},
		{"GET", "/apis", false, call{"get", "discovery"}},
		{"GET", "/version", false, call{"get", "/version"}},
	}
	for _, c := range cases {
		if got := classify(c.method, c.path, c.watch); got != c.want {
			t.Errorf("classify(%s %s, watch=%v) = %v, want %v", c.method, c.path, c.watch, got, c.want)
		}
	}
}
