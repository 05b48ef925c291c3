package images

import (
	"context"
	"fmt"
	"net/http"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Push writes img to the registry at host (e.g. "127.0.0.1:5000", plain HTTP) as its Ref's repository and tag,
// through rt (nil: http.DefaultTransport). Blobs the registry already has are not sent again.
//
// The registry host of Ref is dropped ("docker.io/rayproject/ray:2.52.0" becomes host/rayproject/ray:2.52.0,
// "docker.io/library/redis:7.4" host/library/redis:7.4), which is the path containerd asks a mirror for.
func Push(ctx context.Context, img Image, host string, rt http.RoundTripper) error {
	src, err := parseRef(img.Ref)
	if err != nil {
		return fmt.Errorf("images: push: %w", err)
	}
	dst, err := name.NewTag(host+"/"+src.RepositoryStr()+":"+src.TagStr(), name.Insecure, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("images: push %s to registry %q: %w", img.Ref, host, err)
	}
	v, err := readLayout(img.Path)
	if err != nil {
		return fmt.Errorf("images: push %s: %w", img.Ref, err)
	}
	if rt == nil {
		rt = http.DefaultTransport
	}
	if err := remote.Write(dst, v, remote.WithContext(ctx), remote.WithTransport(rt)); err != nil {
		return fmt.Errorf("images: push %s to %s: %w", img.Ref, dst, err)
	}
	return nil
}
