package images

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestFromFilesMovesATag: two images of FromFiles under one tag differ by their content, and the second push moves
// the tag at the registry to the second digest.
func TestFromFilesMovesATag(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	const ref = "docker.io/library/moving:v1"
	var digests []v1.Hash
	for i, data := range []string{"one\n", "two\n"} {
		img, err := FromFiles(filepath.Join(dir, string(rune('a'+i))), ref, []File{{Name: "version", Mode: 0o644, Data: []byte(data)}}, v1.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := Push(context.Background(), img, host, nil); err != nil {
			t.Fatal(err)
		}
		v, err := readLayout(img.Path)
		if err != nil {
			t.Fatal(err)
		}
		d, err := v.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
	}
	if digests[0] == digests[1] {
		t.Fatalf("two contents gave one digest %s", digests[0])
	}
	tag, err := name.NewTag(host+"/library/moving:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(tag)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != digests[1] {
		t.Errorf("the registry's tag names %s, want the second push's %s", desc.Digest, digests[1])
	}
	if _, err := FromFiles(filepath.Join(dir, "a"), ref, nil, v1.Config{}); err == nil {
		t.Error("FromFiles over an existing layout: no error")
	}
}
