package integration

import (
	"debug/elf"
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
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if runtime.GOOS == "linux" {
		checkStatic(t, bin)
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

// checkStatic fails unless bin is an ELF executable with no interpreter (PT_INTERP) and no shared libraries
// (DT_NEEDED): a dynamic loader or a libc the target image lacks would stop the copy from running.
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("puller is not an ELF binary: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("puller is dynamically linked: it has an ELF interpreter (PT_INTERP)")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) > 0 {
		t.Errorf("puller needs shared libraries %v, want none", libs)
	}
}
