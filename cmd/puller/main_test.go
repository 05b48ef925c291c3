package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestStaticInstallAndRun builds the puller as the image build does (CGO_ENABLED=0), checks it is statically
// linked, installs it with "install" and runs the copy.
func TestStaticInstallAndRun(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "puller")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if runtime.GOOS == "linux" {
		if out, err := exec.Command("file", bin).CombinedOutput(); err == nil && !strings.Contains(string(out), "statically linked") {
			t.Fatalf("puller is not statically linked: %s", out)
		}
	}
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > 4<<20 {
		t.Errorf("puller is %d bytes, want a tiny binary", st.Size())
	}
	dst := filepath.Join(dir, "shared", "puller")
	if err := os.Mkdir(filepath.Dir(dst), 0o777); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "install", dst).CombinedOutput(); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	out, err := exec.Command(dst).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "image pulled" {
		t.Fatalf("installed puller: %v %q", err, out)
	}
	if err := exec.Command(dst, "bogus").Run(); err == nil {
		t.Fatal("unknown arguments should fail")
	}
}
