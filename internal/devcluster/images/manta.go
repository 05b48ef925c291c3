package images

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/manta-dev/manta/internal/version"
)

// MantaRepository is the repository of Manta's image, charts/manta's default image.repository.
const MantaRepository = "ghcr.io/manta-dev/manta"

// MantaRef is Manta's image as charts/manta names it by default: its repository at the chart's appVersion, which
// follows internal/version.Version.
func MantaRef() string { return MantaRepository + ":" + version.Version }

// CABundle is where the image carries the CA bundle, copied from the same path on this machine (Debian's
// ca-certificates), where distroless has it and Go looks first.
const CABundle = "/etc/ssl/certs/ca-certificates.crt"

// mantaConfig is the Dockerfile's: distroless/static:nonroot's user (uid and gid 65532, numeric so that
// runAsNonRoot can be checked) and environment, with /manta as the entrypoint.
var mantaConfig = v1.Config{
	Entrypoint: []string{"/manta"},
	User:       "65532:65532",
	WorkingDir: "/",
	Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=" + CABundle},
}

// distroless/static's users and groups, so that uid 65532 has a name and a home as in the Dockerfile's base.
const (
	mantaPasswd = "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	mantaGroup  = "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"
)

// EnsureManta builds Manta's image from the source at srcDir as the Dockerfile does, without Docker: the manta and
// puller binaries (CGO_ENABLED=0, -trimpath, stripped, the manta binary stamped with srcDir's git commit), the
// machine's CA bundle, distroless's /etc/passwd and /etc/group and a /tmp, user 65532:65532, entrypoint /manta.
// The manta binary is also at /manager, the command KubeRay's chart gives its operator container. The layout is
// <bin>/images/manta, tagged MantaRef(); it is written again only when a binary or the bundle changed (the go build
// itself is incremental, seconds when nothing changed).
func EnsureManta(ctx context.Context, binDir, srcDir string, logf func(format string, args ...any)) (Image, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(filepath.Join(binDir, "images"), 0o755); err != nil {
		return Image{}, fmt.Errorf("images: manta: %w", err)
	}
	work, err := os.MkdirTemp(filepath.Join(binDir, "images"), ".go-manta-")
	if err != nil {
		return Image{}, fmt.Errorf("images: manta: %w", err)
	}
	defer os.RemoveAll(work)
	files, err := mantaFiles(ctx, srcDir, work)
	if err != nil {
		return Image{}, err
	}

	// The recipe's inputs are what ends up in the image, so an unchanged build keeps the layout (and its digest).
	inputs := []string{runtime.GOARCH, configString(mantaConfig)}
	for _, f := range files {
		sum := sha256.Sum256(f.data)
		inputs = append(inputs, fmt.Sprintf("%s %o %v %s %d %s", f.name, f.mode, f.dir, f.link, f.uid, hex.EncodeToString(sum[:])))
	}
	r := recipe{name: "manta", ref: MantaRef(), inputs: inputs, build: func(_ context.Context, _ *builder, out, work string) error {
		lf := filepath.Join(work, "layer.tar.gz")
		if err := filesLayer(lf, files); err != nil {
			return err
		}
		return writeLayout(out, MantaRef(), mantaConfig, lf)
	}}
	imgs, err := ensure(ctx, binDir, logf, []recipe{r})
	if err != nil {
		return Image{}, err
	}
	return imgs[0], nil
}

// MantaAt writes Manta's image built from the source at srcDir, as EnsureManta builds it, as an OCI layout at out
// (which must not exist) named ref: an earlier Manta's image, from a git worktree of its commit, under a tag of
// its own, for an upgrade's "before". Unlike EnsureManta it keeps nothing between calls.
func MantaAt(ctx context.Context, srcDir, out, ref string) (Image, error) {
	if _, err := os.Stat(out); err == nil {
		return Image{}, fmt.Errorf("images: %s exists", out)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return Image{}, err
	}
	work, err := os.MkdirTemp(filepath.Dir(out), ".go-manta-")
	if err != nil {
		return Image{}, fmt.Errorf("images: %s: %w", ref, err)
	}
	defer os.RemoveAll(work)
	files, err := mantaFiles(ctx, srcDir, work)
	if err != nil {
		return Image{}, err
	}
	lf := filepath.Join(work, "layer.tar.gz")
	if err := filesLayer(lf, files); err != nil {
		return Image{}, fmt.Errorf("images: %s: %w", ref, err)
	}
	if err := writeLayout(out, ref, mantaConfig, lf); err != nil {
		return Image{}, fmt.Errorf("images: %s: %w", ref, err)
	}
	return Image{Ref: ref, Path: out}, nil
}

// mantaFiles builds the manta and puller binaries of the source at srcDir in work and returns the image's files:
// the binaries, /manager, the CA bundle, distroless's users, groups, home and /tmp.
func mantaFiles(ctx context.Context, srcDir, work string) ([]fileEntry, error) {
	commit := gitCommit(ctx, srcDir)
	bins := map[string][]string{
		"manta":  {"-ldflags=-s -w -X github.com/manta-dev/manta/internal/version.Commit=" + commit, "./cmd/manta"},
		"puller": {"-ldflags=-s -w", "./cmd/puller"},
	}
	files := []fileEntry{
		{name: "etc/passwd", mode: 0o644, data: []byte(mantaPasswd)},
		{name: "etc/group", mode: 0o644, data: []byte(mantaGroup)},
		{name: "home/nonroot", mode: 0o700, dir: true, uid: 65532},
		{name: "tmp", mode: 0o1777, dir: true},
		{name: "manager", mode: 0o755, link: "manta"},
	}
	for _, name := range []string{"manta", "puller"} {
		out := filepath.Join(work, name)
		args := append([]string{"build", "-trimpath", "-o", out}, bins[name]...)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = srcDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOFLAGS=-buildvcs=false")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("images: manta: go build %s: %w: %s", bins[name][1], err, strings.TrimSpace(stderr.String()))
		}
		data, err := os.ReadFile(out)
		if err != nil {
			return nil, fmt.Errorf("images: manta: %w", err)
		}
		files = append(files, fileEntry{name: name, mode: 0o755, data: data})
	}
	ca, err := os.ReadFile(CABundle)
	if err != nil {
		return nil, fmt.Errorf("images: manta: the image's CA bundle, from this machine (apt-get install ca-certificates): %w", err)
	}
	return append(files, fileEntry{name: strings.TrimPrefix(CABundle, "/"), mode: 0o644, data: ca}), nil
}

// MantaLayout is Manta's image as EnsureManta last wrote it under binDir, if it did.
func MantaLayout(binDir string) (Image, bool) {
	p := filepath.Join(binDir, "images", "manta")
	if _, err := os.Stat(filepath.Join(p, "index.json")); err != nil {
		return Image{}, false
	}
	return Image{Ref: MantaRef(), Path: p}, true
}

// gitCommit is what the Dockerfile's COMMIT build argument is given: srcDir's HEAD, or "unknown" outside git.
func gitCommit(ctx context.Context, srcDir string) string {
	cmd := exec.CommandContext(ctx, "git", "rev-parse", "HEAD")
	cmd.Dir = srcDir
	out, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
