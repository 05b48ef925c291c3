package metawrite

import (
	"maps"
	"os"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/manta-dev/manta/internal/testutil"
)

// The writer's table holds every custom resource Manta's CRDs (config/crd, what the API server serves) give a
// status, named by its resource, and nothing else. The envtest (metawrite/envtest) writes the status of each kind
// the API server serves through the table.
func TestStatusResourcesAreTheCRDs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testutil.MustRepoRoot(t), "config", "crd", "*_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the CRDs in config/crd: %v (found %d)", err, len(files))
	}
	withStatus := map[schema.GroupVersionKind]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(b, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range crd.Spec.Versions {
			if v.Served && v.Subresources != nil && v.Subresources.Status != nil {
				withStatus[schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}] = crd.Spec.Names.Plural
			}
		}
	}
	if !maps.Equal(withStatus, statusResources) {
		t.Errorf("the CRDs give a status to %v; metawrite writes %v", withStatus, statusResources)
	}
}
