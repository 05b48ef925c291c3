package testutil

import (
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// LayoutImage is the one image of the OCI image layout at path (what the dev cluster's images are kept as).
func LayoutImage(t testing.TB, path string) v1.Image {
	t.Helper()
	p, err := layout.FromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("layout %s: %d images, want 1", path, len(m.Manifests))
	}
	img, err := p.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
