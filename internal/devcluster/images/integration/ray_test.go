package integration

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/crane"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/manta-dev/manta/internal/devcluster/images"
	"github.com/manta-dev/manta/internal/sys/mounts"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestRayImage builds the Ray image (minutes cold; stamped in the repository's bin/, so later runs reuse it), checks
// that a second Ensure builds nothing, that the image looks like rayproject/ray where KubeRay and Manta rely on it,
// and runs the packed image's `ray --version` in a chroot of its unpacked layers, as its user.
func TestRayImage(t *testing.T) {
	ctx := testContext(t, 40*time.Minute)
	bin := repoBin(t)
	imgs, err := images.Ensure(ctx, bin, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	ray := find(t, imgs, "docker.io/rayproject/ray:2.52.0")

	var mu sync.Mutex
	var logged []string
	start := time.Now()
	again, err := images.Ensure(ctx, bin, func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, fmt.Sprintf(format, args...))
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(logged) > 0 {
		t.Fatalf("a second Ensure with nothing changed did work: %q", logged)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("a second Ensure with nothing changed took %s", took)
	}
	if got := find(t, again, ray.Ref); got != ray {
		t.Fatalf("second Ensure returned %+v, first %+v", got, ray)
	}

	img := testutil.LayoutImage(t, ray.Path)
	if err := validate.Image(img, validate.Fast); err != nil {
		t.Fatalf("Ray image is not valid: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "1000" || c.WorkingDir != "/home/ray" {
		t.Errorf("user %q, workdir %q; want 1000 and /home/ray, as rayproject/ray", c.User, c.WorkingDir)
	}
	if !slices.Contains(c.Env, "HOME=/home/ray") || !slices.Contains(c.Env, "PATH=/home/ray/anaconda3/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") {
		t.Errorf("env %q: want HOME=/home/ray and /home/ray/anaconda3/bin first on PATH", c.Env)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Errorf("%d layers, want 2 (Debian base, Ray venv)", len(layers))
	}

	rootfs := filepath.Join(t.TempDir(), "rootfs")
	t.Cleanup(func() {
		if err := mounts.RemoveTree(rootfs); err != nil {
			t.Error(err)
		}
	})
	hdrs := unpack(t, img, rootfs)
	for _, p := range []string{"usr/bin/bash", "usr/bin/wget", "home/ray/anaconda3/bin/ray",
		"home/ray/anaconda3/bin/python", "home/ray/anaconda3/bin/python3", "home/ray/anaconda3/bin/pip"} {
		if _, ok := hdrs[p]; !ok {
			t.Errorf("the image has no /%s", p)
		}
	}
	if h := hdrs["home/ray/anaconda3/bin/ray"]; h != nil && (h.Uid != 1000 || h.Gid != 100) {
		t.Errorf("/home/ray/anaconda3/bin/ray is owned by %d:%d, want 1000:100 (ray can pip install)", h.Uid, h.Gid)
	}
	passwd, err := os.ReadFile(filepath.Join(rootfs, "etc/passwd"))
	if err != nil || !strings.Contains(string(passwd), "ray:x:1000:100::/home/ray:/bin/bash") {
		t.Errorf("/etc/passwd has no user ray 1000:100 with home /home/ray and bash (%v):\n%s", err, passwd)
	}

	// `ray --version` as the image runs it: its user, its environment, its PATH lookup, from the packed layers.
	var out []byte
	err = mounts.WithProcAndDev(rootfs, func() error {
		cmd := exec.CommandContext(ctx, "chroot", "--userspec=1000:100", rootfs, "/usr/bin/env", "-i")
		cmd.Args = append(cmd.Args, c.Env...)
		cmd.Args = append(cmd.Args, "bash", "-c", "cd && ray --version && wget --version | head -1")
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("ray --version in the image: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "ray, version 2.52.0") || !strings.Contains(string(out), "GNU Wget") {
		t.Fatalf("ray --version in the image printed %q, want ray 2.52.0 and wget", out)
	}
	t.Logf("in the image: %s", strings.TrimSpace(string(out)))
}

func find(t *testing.T, imgs []images.Image, ref string) images.Image {
	t.Helper()
	for _, img := range imgs {
		if img.Ref == ref {
			if _, err := os.Stat(filepath.Join(img.Path, "index.json")); err != nil {
				t.Fatalf("%s: %v", ref, err)
			}
			return img
		}
	}
	t.Fatalf("Ensure returned no %s: %+v", ref, imgs)
	return images.Image{}
}

// unpack writes img's layers into dir, as a runtime would (owners, modes, links), and returns the headers by path.
// The layers have no whiteouts: each adds files only.
func unpack(t *testing.T, img v1.Image, dir string) map[string]*tar.Header {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	hdrs := map[string]*tar.Header{}
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		layerHdrs := map[string]*tar.Header{}
		if err := untar(rc, dir, layerHdrs); err != nil {
			t.Fatal(err)
		}
		rc.Close()
		var size int64
		for p, h := range layerHdrs {
			hdrs[p] = h
			size += h.Size
		}
		compressed, _ := l.Size()
		t.Logf("layer %d: %d files, %d MB unpacked, %d MB compressed", i, len(layerHdrs), size>>20, compressed>>20)
	}
	return hdrs
}

func untar(r io.Reader, dir string, hdrs map[string]*tar.Header) error {
	tr := tar.NewReader(r)
	var dirs []*tar.Header
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		rel := strings.TrimSuffix(filepath.Clean(h.Name), "/")
		if rel == "." || strings.HasPrefix(rel, "../") || strings.Contains(filepath.Base(rel), ".wh.") {
			return fmt.Errorf("unexpected entry %q", h.Name)
		}
		hdrs[rel] = h
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			dirs = append(dirs, h)
			continue
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		case tar.TypeLink:
			if err := os.Link(filepath.Join(dir, h.Linkname), p); err != nil {
				return err
			}
			continue
		default:
			return fmt.Errorf("%s: unexpected type %c", h.Name, h.Typeflag)
		}
		if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			// After chown, which clears set-id bits.
			if err := os.Chmod(p, fileMode(h)); err != nil {
				return err
			}
		}
	}
	for _, h := range dirs {
		p := filepath.Join(dir, strings.TrimSuffix(filepath.Clean(h.Name), "/"))
		if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
			return err
		}
		if err := os.Chmod(p, fileMode(h)); err != nil {
			return err
		}
	}
	return nil
}

// fileMode is h's permission and set-id bits as an os.FileMode.
func fileMode(h *tar.Header) os.FileMode {
	m := os.FileMode(h.Mode).Perm()
	if h.Mode&04000 != 0 {
		m |= os.ModeSetuid
	}
	if h.Mode&02000 != 0 {
		m |= os.ModeSetgid
	}
	if h.Mode&01000 != 0 {
		m |= os.ModeSticky
	}
	return m
}

// TestPushRayAndRedis pushes the rootfs images to a registry on loopback and pulls back the digests pods will get.
func TestPushRayAndRedis(t *testing.T) {
	ctx := testContext(t, 40*time.Minute)
	imgs, err := images.Ensure(ctx, repoBin(t), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	reg := newCountingRegistry(t)
	for _, tc := range []struct{ ref, pushed string }{
		{"docker.io/rayproject/ray:2.52.0", "rayproject/ray:2.52.0"},
		{"docker.io/library/redis:7.4.0", "library/redis:7.4.0"},
	} {
		img := find(t, imgs, tc.ref)
		if err := images.Push(ctx, img, reg.host, nil); err != nil {
			t.Fatal(err)
		}
		local := testutil.LayoutImage(t, img.Path)
		want, err := local.Digest()
		if err != nil {
			t.Fatal(err)
		}
		got, err := crane.Digest(reg.host+"/"+tc.pushed, crane.Insecure, crane.WithContext(ctx))
		if err != nil {
			t.Fatalf("%s at the registry: %v", tc.pushed, err)
		}
		if got != want.String() {
			t.Fatalf("%s at the registry is %s, pushed %s", tc.pushed, got, want)
		}
	}
	before := reg.uploads.Load()
	if err := images.Push(ctx, find(t, imgs, "docker.io/rayproject/ray:2.52.0"), reg.host, nil); err != nil {
		t.Fatal(err)
	}
	if n := reg.uploads.Load() - before; n != 0 {
		t.Fatalf("pushing the Ray image again started %d blob uploads, want none", n)
	}
}
