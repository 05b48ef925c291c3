package main

import (
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	in := `ok  	example.com/a	0.1s
--- FAIL: TestOracle (526.76s)
    devcluster.go:145: devcluster: control plane up in 4.287s
    --- FAIL: TestOracle/all (464.96s)
        --- FAIL: TestOracle/all/scenario/x (374.12s)
            oracle_test.go:116: start: 1 differences
                events/RayService Warning/Failed: kuberay=recorded manta=<absent>
    oracle_test.go:164: compared 77 samples
FAIL
FAIL	example.com/oracle	526.9s
starting the Ray head: ray dashboard not ready
FAIL	example.com/ray	300.1s
panic: test timed out after 75m0s
	running tests:
goroutine 1 [running]:
FAIL	example.com/slow	4500.0s
ok  	example.com/b	0.2s
`
	got, err := summarize(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"==> failed tests (the first lines of each; the whole output is above)",
		"FAIL example.com/oracle",
		"  --- FAIL: TestOracle",
		"    devcluster.go:145: devcluster: control plane up in 4.287s",
		"    oracle_test.go:164: compared 77 samples",
		"  --- FAIL: TestOracle/all/scenario/x",
		"    oracle_test.go:116: start: 1 differences",
		"    events/RayService Warning/Failed: kuberay=recorded manta=<absent>",
		"FAIL example.com/ray",
		"    starting the Ray head: ray dashboard not ready",
		"FAIL example.com/slow",
		"    panic: test timed out after 75m0s",
		"    running tests:",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got, _ := summarize(strings.NewReader("ok  \texample.com/a\t0.1s\n")); got != nil {
		t.Errorf("a passing run: %q, want nothing", got)
	}
}
