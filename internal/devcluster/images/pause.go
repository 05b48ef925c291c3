package images

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

//go:embed pause/main.go
var pauseSource string

// PauseRef is the sandbox image the kubelet and containerd of Kubernetes v1.37 use.
const PauseRef = "registry.k8s.io/pause:3.10"

// pauseGoMod makes the embedded source a module of its own, so it builds anywhere the go command runs.
const pauseGoMod = "module pause\n\ngo 1.26\n"

func pauseRecipe() recipe {
	return recipe{
		name: "pause",
		ref:  PauseRef,
		// The Go toolchain's version is an input: a new compiler gives a new binary.
		inputs: []string{pauseSource, pauseGoMod, runtime.GOARCH, goVersion(), configString(pauseConfig)},
		build:  buildPause,
	}
}

// goVersion names the go command that builds the pause binary (the one on PATH, as for every other tool in bin/).
func goVersion() string {
	out, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func buildPause(ctx context.Context, b *builder, out, work string) error {
	src := filepath.Join(work, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(pauseGoMod), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(pauseSource), 0o644); err != nil {
		return err
	}
	bin := filepath.Join(work, "pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOWORK=off",
		"GOFLAGS=-buildvcs=false", "GOTOOLCHAIN=local")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build of the pause program: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	lf := filepath.Join(work, "layer.tar.gz")
	if err := filesLayer(lf, []fileEntry{{name: "pause", mode: 0o755, data: data}}); err != nil {
		return err
	}
	return writeLayout(out, PauseRef, pauseConfig, lf)
}

var pauseConfig = v1.Config{
	Entrypoint: []string{"/pause"},
	// The upstream image runs as nobody; a sandbox needs no privilege.
	User: "65535:65535",
}
