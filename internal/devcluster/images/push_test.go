package images

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestPushNamesTheRegistry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := Push(ctx, Image{Ref: "registry.k8s.io/pause:3.10", Path: t.TempDir()}, "127.0.0.1:1", nil)
	if err == nil || !strings.Contains(err.Error(), "registry.k8s.io/pause:3.10") {
		t.Fatalf("push of an empty layout: %v, want an error naming the image", err)
	}
	err = Push(ctx, Image{Ref: "pause", Path: t.TempDir()}, "127.0.0.1:1", nil)
	if err == nil || !strings.Contains(err.Error(), `"pause"`) {
		t.Fatalf("push of an untagged reference: %v, want an error naming it", err)
	}
}
