package integration

import (
	"archive/tar"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/manta-dev/manta/internal/devcluster/images"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestEnsureManta: Manta's image holds what the Dockerfile's does (the manta binary as entrypoint, /puller, the
// machine's CA bundle, distroless's nonroot user, user 65532:65532) plus /manager, a hard link to /manta; the
// binary in it starts with no writable directory and reports the repository's commit; a second EnsureManta with
// nothing changed keeps the layout.
func TestEnsureManta(t *testing.T) {
	ctx := testContext(t, 15*time.Minute)
	src := filepath.Join(repoBin(t), "..")
	img, err := images.EnsureManta(ctx, repoBin(t), src, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if img.Ref != images.MantaRef() || !strings.HasPrefix(img.Ref, images.MantaRepository+":v") {
		t.Errorf("ref %s, want %s", img.Ref, images.MantaRef())
	}
	v := testutil.LayoutImage(t, img.Path)
	if err := validate.Image(v); err != nil {
		t.Fatalf("invalid image: %v", err)
	}
	cf, err := v.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/manta"}) || cf.OS != "linux" {
		t.Errorf("config: user %q entrypoint %v os %s, want 65532:65532, [/manta], linux", cf.Config.User, cf.Config.Entrypoint, cf.OS)
	}
	hdrs, data := layerFiles(t, v, 1<<20)
	for name, mode := range map[string]int64{"manta": 0o755, "puller": 0o755, "etc/ssl/certs/ca-certificates.crt": 0o644, "etc/passwd": 0o644} {
		h := hdrs[name]
		if h == nil || h.Typeflag != tar.TypeReg || h.Mode != mode {
			t.Errorf("%s: %+v, want a regular file of mode %o", name, h, mode)
		}
	}
	if h := hdrs["manager"]; h == nil || h.Typeflag != tar.TypeLink || h.Linkname != "manta" {
		t.Errorf("manager: %+v, want a hard link to manta", h)
	}
	if h := hdrs["tmp"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode != 0o1777 {
		t.Errorf("tmp: %+v, want a directory of mode 1777", h)
	}
	ca, err := os.ReadFile(images.CABundle)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data["etc/ssl/certs/ca-certificates.crt"], ca) {
		t.Error("the image's CA bundle is not this machine's")
	}
	if !strings.Contains(string(data["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("etc/passwd has no nonroot user: %q", data["etc/passwd"])
	}

	// The binary in the image, run here: it is static and reports the commit it was built from.
	bin := filepath.Join(t.TempDir(), "manta")
	if err := os.WriteFile(bin, binaryOf(t, v, "manta"), 0o755); err != nil {
		t.Fatal(err)
	}
	// With nowhere to write, as under the chart's readOnlyRootFilesystem: a package that writes at init (envtest's
	// port cache did) would panic here.
	cmd := exec.CommandContext(ctx, bin, "version")
	cmd.Env = []string{"HOME=/proc/nowhere", "XDG_CACHE_HOME=/proc/nowhere", "TMPDIR=/proc/nowhere"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("manta version with nowhere to write: %v: %s", err, out)
	}
	head, err := exec.CommandContext(ctx, "git", "-C", src, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	if commit := strings.TrimSpace(string(head)); commit == "" || !strings.Contains(string(out), commit) {
		t.Errorf("manta version says %q, want commit %s", out, commit)
	}

	d1, err := v.Digest()
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(filepath.Join(img.Path, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := images.EnsureManta(ctx, repoBin(t), src, t.Logf); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(filepath.Join(img.Path, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	v2 := testutil.LayoutImage(t, img.Path)
	d2, err := v2.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 || !os.SameFile(before, after) {
		t.Errorf("an unchanged EnsureManta wrote the layout again: %s, then %s", d1, d2)
	}
}

// binaryOf reads the regular file name from img's layers, whatever its size.
func binaryOf(t *testing.T, img v1.Image, name string) []byte {
	t.Helper()
	_, data := layerFiles(t, img, 1<<30)
	b, ok := data[name]
	if !ok {
		t.Fatalf("no %s in the image", name)
	}
	return b
}
