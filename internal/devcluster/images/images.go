// Package images builds the container images the dev cluster's real node runs, on this machine, from sources it can
// reach (the Go toolchain, Debian's packages, PyPI), and pushes them to the dev cluster's local registry. Each image
// is an OCI image layout under <bin>/images/<name>, rebuilt only when the hash of its recipe changes (stamped under
// <bin>/.stamps/image-<name>).
package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/manta-dev/manta/internal/sys/mounts"
)

// Image is one image the dev cluster serves from its local registry.
type Image struct {
	Ref  string // the reference pods use, normalized: "docker.io/rayproject/ray:2.52.0", "registry.k8s.io/pause:3.10"
	Path string // an OCI image layout directory (or docker-archive tarball) under <bin>/images
}

// recipe is how one image is built. Its hash (name, ref, inputs and recipeVersion) decides a rebuild, so every
// constant that changes the result belongs in inputs.
type recipe struct {
	name   string // directory under <bin>/images and stamp name
	ref    string
	inputs []string
	// build writes an OCI layout holding exactly one image, tagged ref, at out (which does not exist yet); work is an
	// empty scratch directory on the same file system, removed afterwards.
	build func(ctx context.Context, b *builder, out, work string) error
}

// recipeVersion changes when the way every image is packed changes (layer format, layout shape).
const recipeVersion = "1"

// builder carries what recipes share.
type builder struct {
	binDir string
	logf   func(format string, args ...any)
	start  time.Time // of the image being built
}

// progress logs a step of the image being built with the time since its build started, so a slow build shows
// where its time goes.
func (b *builder) progress(format string, args ...any) {
	b.logf("images: %s: "+format, append([]any{time.Since(b.start).Round(time.Second)}, args...)...)
}

func (r recipe) hash() string {
	h := sha256.New()
	for _, s := range append([]string{recipeVersion, r.name, r.ref}, r.inputs...) {
		fmt.Fprintf(h, "%d:%s\n", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// recipes is every image the dev cluster serves, in build order: pause first, since no pod runs without it.
func recipes() []recipe {
	return []recipe{pauseRecipe(), rayRecipe(), redisRecipe()}
}

// Ensure builds every image that is missing or whose inputs changed (stamped under <bin>/.stamps), and returns them all.
func Ensure(ctx context.Context, binDir string, logf func(format string, args ...any)) ([]Image, error) {
	return ensure(ctx, binDir, logf, recipes())
}

// EnsurePause builds only the sandbox image (registry.k8s.io/pause), which takes seconds where the Ray image takes
// minutes cold, for callers that need a pod sandbox before anything else.
func EnsurePause(ctx context.Context, binDir string, logf func(format string, args ...any)) (Image, error) {
	imgs, err := ensure(ctx, binDir, logf, []recipe{pauseRecipe()})
	if err != nil {
		return Image{}, err
	}
	return imgs[0], nil
}

func ensure(ctx context.Context, binDir string, logf func(format string, args ...any), rs []recipe) ([]Image, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, fmt.Errorf("images: bin directory: %w", err)
	}
	// Resolved, because mount points under a build directory are found by their real path.
	binDir, err := filepath.EvalSymlinks(binDir)
	if err == nil {
		binDir, err = filepath.Abs(binDir)
	}
	if err != nil {
		return nil, fmt.Errorf("images: bin directory: %w", err)
	}
	root := filepath.Join(binDir, "images")
	stamps := filepath.Join(binDir, ".stamps")
	for _, d := range []string{root, stamps} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("images: %w", err)
		}
	}
	b := &builder{binDir: binDir, logf: logf}
	var out []Image
	for _, r := range rs {
		img, err := ensureOne(ctx, b, r, root, stamps)
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	return out, nil
}

// ensureOne builds r unless its stamp matches. Test binaries of several packages and `manta dev` may call Ensure at
// once: one builds each image, the others wait for that image only (so the pause image is not held up by a Ray
// build), and since every caller goes through the recipes in the same order no two debootstraps share the
// package cache at once.
func ensureOne(ctx context.Context, b *builder, r recipe, root, stamps string) (Image, error) {
	img := Image{Ref: r.ref, Path: filepath.Join(root, r.name)}
	stamp := filepath.Join(stamps, "image-"+r.name)
	want := r.hash()
	if fresh(img.Path, stamp, want) {
		return img, nil
	}
	unlock, err := lockFile(ctx, filepath.Join(root, ".lock-"+r.name), b.logf)
	if err != nil {
		return Image{}, err
	}
	defer unlock()
	if fresh(img.Path, stamp, want) { // built by the caller we waited for
		return img, nil
	}
	if err := build(ctx, b, r, root, img.Path); err != nil {
		return Image{}, err
	}
	if err := os.WriteFile(stamp, []byte(want+"\n"), 0o644); err != nil {
		return Image{}, fmt.Errorf("images: %s: %w", r.name, err)
	}
	return img, nil
}

func fresh(path, stamp, want string) bool {
	got, err := os.ReadFile(stamp)
	if err != nil || strings.TrimSpace(string(got)) != want {
		return false
	}
	_, err = os.Stat(filepath.Join(path, "index.json"))
	return err == nil
}

// build writes r's layout beside path and renames it into place, so a killed build never leaves a half layout
// that a later Ensure would take for a finished one.
func build(ctx context.Context, b *builder, r recipe, root, path string) error {
	start := time.Now()
	b.start = start
	b.logf("images: building %s (%s)", r.ref, r.name)
	work := filepath.Join(root, ".work-"+r.name)
	tmp := filepath.Join(root, ".new-"+r.name)
	if err := mounts.RemoveTree(work); err != nil {
		return fmt.Errorf("images: %s: leftovers of an earlier build: %w", r.name, err)
	}
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("images: %s: %w", r.name, err)
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return fmt.Errorf("images: %s: %w", r.name, err)
	}
	err := r.build(ctx, b, tmp, work)
	if rerr := mounts.RemoveTree(work); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("images: building %s: %w", r.ref, err)
	}
	// Two renames, so a reader of the old layout sees it or the new one, each whole, but for an instant neither.
	old := filepath.Join(root, ".old-"+r.name)
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("images: %s: %w", r.name, err)
	}
	if err := os.Rename(path, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("images: %s: %w", r.name, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("images: %s: %w", r.name, err)
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("images: %s: %w", r.name, err)
	}
	b.logf("images: built %s in %s", r.ref, time.Since(start).Round(time.Second))
	return nil
}

// lockFile takes an exclusive flock on path, giving up when ctx ends.
func lockFile(ctx context.Context, path string, logf func(string, ...any)) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("images: lock: %w", err)
	}
	waiting := false
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("images: lock %s: %w", path, err)
		}
		if !waiting {
			logf("images: waiting for another build of the dev cluster's images (%s)", path)
			waiting = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("images: waiting for %s: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}

// parseRef checks that ref is a tagged reference and returns it.
func parseRef(ref string) (name.Tag, error) {
	t, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return name.Tag{}, fmt.Errorf("image reference %q: %w", ref, err)
	}
	return t, nil
}
