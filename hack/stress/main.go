// Command stress runs a `go test` command several times in a row while busy goroutines take CPU from it, and writes
// down every test that failed, with its output, so a test that needs an idle machine is found before CI finds it.
// `make test-stress` runs `make test`'s command this way.
//
// Usage: go run ./hack/stress [-rounds 3] [-hogs 1] [-out stress-results] -- <go test arguments>
//
// Each round's `go test -json` stream goes to <out>/round-N.json; <out>/summary.md lists each round's time, its
// slowest packages and every failed test with the last lines of its output. The command goes on to the next round
// after a failure (the point is to see how often each test fails) and exits 1 when any round failed.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

// round is what one run of the test command showed.
type round struct {
	n        int
	took     time.Duration
	exit     error
	failed   []failure
	packages []pkgTime
}

type failure struct {
	pkg, test string
	tail      []string
}

type pkgTime struct {
	pkg     string
	elapsed float64
	result  string
}

const tailLines = 40

func main() {
	rounds := flag.Int("rounds", 3, "how many times to run the test command")
	hogs := flag.Int("hogs", 1, "busy goroutines, each on its own OS thread, running for the whole time (0: none)")
	out := flag.String("out", "stress-results", "directory for each round's go test -json stream and summary.md")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: stress [flags] -- <go test arguments>")
		flag.PrintDefaults()
	}
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 || *rounds < 1 || *hogs < 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fatal(err)
	}
	var stop atomic.Bool
	startHogs(*hogs, &stop)
	defer stop.Store(true)

	var results []round
	failedRounds := 0
	for n := 1; n <= *rounds; n++ {
		fmt.Fprintf(os.Stderr, "stress: round %d of %d, %d CPU hog(s)\n", n, *rounds, *hogs)
		r, err := runRound(n, args, filepath.Join(*out, fmt.Sprintf("round-%d.json", n)))
		if err != nil {
			fatal(err)
		}
		if r.exit != nil {
			failedRounds++
		}
		fmt.Fprintf(os.Stderr, "stress: round %d took %s, %d failed test(s), exit: %v\n", n, r.took.Round(time.Second), len(r.failed), r.exit)
		for _, f := range r.failed {
			fmt.Fprintf(os.Stderr, "stress:   FAIL %s %s\n", f.pkg, f.test)
		}
		results = append(results, r)
		// Written after each round, so a run cut short still leaves what it found.
		if err := os.WriteFile(filepath.Join(*out, "summary.md"), []byte(summary(results, *hogs)), 0o644); err != nil {
			fatal(err)
		}
	}
	fmt.Fprintf(os.Stderr, "stress: %d of %d round(s) failed; %s\n", failedRounds, *rounds, filepath.Join(*out, "summary.md"))
	if failedRounds > 0 {
		os.Exit(1)
	}
}

// startHogs starts n goroutines that spin until stop, each locked to a thread so the Go scheduler cannot fold them
// onto fewer cores than asked.
func startHogs(n int, stop *atomic.Bool) {
	if n == 0 {
		return
	}
	runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), n+1))
	for range n {
		go func() {
			runtime.LockOSThread()
			x := uint64(1)
			for !stop.Load() {
				for range 1 << 16 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			_ = x
		}()
	}
}

// runRound runs `go test -json args`, keeping the stream in path, and reads from it the failed tests and the
// packages' times.
func runRound(n int, args []string, path string) (round, error) {
	f, err := os.Create(path)
	if err != nil {
		return round{}, err
	}
	defer f.Close()
	cmd := exec.Command("go", append([]string{"test", "-json"}, args...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return round{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return round{}, err
	}
	r := round{n: n}
	readEvents(io.TeeReader(stdout, f), &r)
	r.exit = cmd.Wait()
	r.took = time.Since(start)
	return r, nil
}

// readEvents collects each test's output and keeps the last lines of those that failed. A failed parent test is
// left out when one of its subtests failed, which names the cause more precisely. Lines that are not JSON (a build
// failure prints plain text) are kept as the package's output.
func readEvents(in io.Reader, r *round) {
	outputs := map[[2]string][]string{}
	var failed [][2]string
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			key := [2]string{"", ""}
			outputs[key] = appendTail(outputs[key], sc.Text())
			continue
		}
		key := [2]string{e.Package, e.Test}
		switch e.Action {
		case "output":
			outputs[key] = appendTail(outputs[key], strings.TrimRight(e.Output, "\n"))
		case "fail":
			failed = append(failed, key)
			if e.Test == "" {
				r.packages = append(r.packages, pkgTime{pkg: e.Package, elapsed: e.Elapsed, result: "FAIL"})
			}
		case "pass":
			if e.Test == "" {
				r.packages = append(r.packages, pkgTime{pkg: e.Package, elapsed: e.Elapsed, result: "ok"})
			}
		}
	}
	for _, k := range failed {
		hasFailedChild := slices.ContainsFunc(failed, func(o [2]string) bool {
			return o[0] == k[0] && (strings.HasPrefix(o[1], k[1]+"/") || k[1] == "" && o[1] != "")
		})
		if hasFailedChild {
			continue
		}
		r.failed = append(r.failed, failure{pkg: k[0], test: k[1], tail: outputs[k]})
	}
	if len(outputs[[2]string{"", ""}]) > 0 && len(r.failed) == 0 {
		r.failed = append(r.failed, failure{pkg: "(no package)", tail: outputs[[2]string{"", ""}]})
	}
	slices.SortFunc(r.packages, func(a, b pkgTime) int { return cmp.Compare(b.elapsed, a.elapsed) })
}

func appendTail(lines []string, line string) []string {
	lines = append(lines, line)
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	return lines
}

func summary(results []round, hogs int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Stress run: %d round(s), %d CPU hog(s), %d CPUs\n\n", len(results), hogs, runtime.NumCPU())
	for _, r := range results {
		status := "passed"
		if r.exit != nil {
			status = "FAILED (" + r.exit.Error() + ")"
		}
		fmt.Fprintf(&b, "## Round %d: %s in %s\n\nSlowest packages:", r.n, status, r.took.Round(time.Second))
		for i, p := range r.packages {
			if i == 5 {
				break
			}
			fmt.Fprintf(&b, " %s %.0fs (%s);", p.pkg, p.elapsed, p.result)
		}
		b.WriteString("\n\n")
		for _, f := range r.failed {
			fmt.Fprintf(&b, "### FAIL %s %s\n\n```\n%s\n```\n\n", f.pkg, f.test, strings.Join(f.tail, "\n"))
		}
	}
	return b.String()
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "stress:", err)
	os.Exit(1)
}
