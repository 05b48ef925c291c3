package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A repository of two commits whose cmd/manta prints which one it is: MANTA_BENCH_BASE=<the first> builds the
// first into the directory given, leaving no worktree behind; the binary wins over nothing, the pair is refused.
func TestBaseBinary(t *testing.T) {
	repo := t.TempDir()
	run := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	main := func(says string) string {
		return "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"" + says + "\") }\n"
	}
	run(repo, "git", "init", "-q")
	write("go.mod", "module example.com/m\n\ngo 1.22\n")
	write("cmd/manta/main.go", main("before"))
	run(repo, "git", "add", ".")
	run(repo, "git", "commit", "-q", "-m", "before")
	first := run(repo, "git", "rev-parse", "HEAD")
	write("cmd/manta/main.go", main("after"))
	run(repo, "git", "commit", "-q", "-am", "after")

	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	dir := t.TempDir()
	bin, err := baseBinary(env(map[string]string{"MANTA_BENCH_BASE": first[:7]}), repo, dir)
	if err != nil {
		t.Fatal(err)
	}
	if bin != filepath.Join(dir, "manta") {
		t.Errorf("built %s, want it in %s", bin, dir)
	}
	if got := run(dir, bin); got != "before" {
		t.Errorf("the base binary says %q, want the first commit's %q", got, "before")
	}
	if wts := run(repo, "git", "worktree", "list"); strings.Count(wts, "\n") != 0 {
		t.Errorf("worktrees left behind:\n%s", wts)
	}

	if bin, err := baseBinary(env(map[string]string{"MANTA_BENCH_BASE_BIN": "/x/manta"}), repo, dir); err != nil || bin != "/x/manta" {
		t.Errorf("MANTA_BENCH_BASE_BIN: %q, %v", bin, err)
	}
	if bin, err := baseBinary(env(nil), repo, dir); err != nil || bin != "" {
		t.Errorf("neither set: %q, %v; want this tree's binary (empty)", bin, err)
	}
	if _, err := baseBinary(env(map[string]string{"MANTA_BENCH_BASE": first, "MANTA_BENCH_BASE_BIN": "/x/manta"}), repo, dir); err == nil {
		t.Error("both set: accepted")
	}
	if _, err := baseBinary(env(map[string]string{"MANTA_BENCH_BASE": "no-such-rev"}), repo, t.TempDir()); err == nil || !strings.Contains(err.Error(), "no-such-rev") {
		t.Errorf("an unknown revision: %v", err)
	}
}

// Each contender runs the binary it should: manta-base the base when there is one, else this tree's.
func TestBinaryFor(t *testing.T) {
	bins := map[string]string{"kuberay": "/k", "manta": "/m", "manta-base": "/b"}
	for name, want := range map[string]string{"manta": "/m", "manta-base": "/b", "kuberay": "/k", "kuberay-c8": "/k"} {
		if got := binaryFor(contenders[name], bins); got != want {
			t.Errorf("%s runs %q, want %q", name, got, want)
		}
	}
	if !needsCurrentManta(contenders["manta"], bins) || needsCurrentManta(contenders["manta-base"], bins) ||
		needsCurrentManta(contenders["kuberay"], bins) || needsCurrentManta(contenders["raw"], bins) {
		t.Error("needsCurrentManta with a base binary")
	}
	delete(bins, "manta-base")
	if got := binaryFor(contenders["manta-base"], bins); got != "/m" {
		t.Errorf("manta-base without a base runs %q, want this tree's /m", got)
	}
	if !needsCurrentManta(contenders["manta-base"], bins) {
		t.Error("manta-base without a base must have this tree's binary built")
	}
}
