package devcluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestRequestLog: a push and a pull through the logged registry show as their manifest and blob requests, with the
// registry's status (a missing tag's 404 included).
func TestRequestLog(t *testing.T) {
	var l requestLog
	srv := httptest.NewServer(l.wrap(registry.New()))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(host+"/team/app:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := remote.Write(tag, img, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	pushed := len(l.snapshot())
	got, err := remote.Image(tag, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := got.RawConfigFile(); err != nil {
		t.Fatal(err)
	}
	missing, _ := name.NewTag(host+"/team/app:nope", name.Insecure)
	if _, err := remote.Head(missing); err == nil {
		t.Fatal("HEAD of a missing tag succeeded")
	}
	var manifestGets, blobGets, notFound int
	for _, r := range l.snapshot()[pushed:] {
		if r.Repo() != "team/app" {
			continue
		}
		switch {
		case r.Kind() == "manifests" && r.Ref() == "v1" && r.Method == http.MethodGet && r.Status == http.StatusOK:
			manifestGets++
		case r.Kind() == "blobs" && strings.HasPrefix(r.Ref(), "sha256:") && r.Method == http.MethodGet:
			blobGets++
		case r.Kind() == "manifests" && r.Ref() == "nope" && r.Status == http.StatusNotFound:
			notFound++
		}
	}
	if manifestGets != 1 || blobGets != 1 || notFound != 1 {
		t.Errorf("after the push: %d manifest GETs of v1, %d blob GETs, %d 404s of the missing tag; want 1, 1 (the config), 1\n%v",
			manifestGets, blobGets, notFound, l.snapshot()[pushed:])
	}
	if r := (RegistryRequest{Path: "/v2/"}); r.Repo() != "" || r.Kind() != "" {
		t.Errorf("/v2/ parsed as %q %q", r.Repo(), r.Kind())
	}
}
