// Command failsummary reads the output of `go test` (not -json, not -v) and prints, for every failed package, the
// messages of its failed tests, a few lines each. `make test` prints it last when a test failed: a CI log is often
// seen by its beginning and its end only, and a failed test's message sits in the middle, among thousands of lines.
//
// Usage: go run ./hack/failsummary FILE
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

const (
	linesPerTest = 6   // message lines kept for one failed test
	lineWidth    = 300 // characters kept of one line
	maxLines     = 60  // lines of the whole summary
)

var (
	pkgResult = regexp.MustCompile(`^(ok|FAIL|\?)\s+(\S+)\s`)
	failLine  = regexp.MustCompile(`^(\s*)--- FAIL: (\S+)`)
	otherTest = regexp.MustCompile(`^\s*(--- (PASS|SKIP|FAIL)|=== (RUN|PAUSE|CONT|NAME))`)
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: failsummary FILE")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer func() { _ = f.Close() }()
	lines, err := summarize(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, l := range lines {
		fmt.Println(l)
	}
}

// summarize returns the summary of a go test output: a heading, then for each failed package its name and each
// failed test that says something with its first lines; a package that failed without a failed test (TestMain, a
// timeout's panic, a build error) shows the lines before its FAIL line.
func summarize(r io.Reader) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var out, block []string
	for sc.Scan() {
		line := sc.Text()
		m := pkgResult.FindStringSubmatch(line)
		if m == nil {
			block = append(block, line)
			continue
		}
		if m[1] == "FAIL" {
			out = append(out, "FAIL "+m[2])
			out = append(out, failures(block)...)
		}
		block = block[:0]
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, nil
	}
	out = append([]string{"==> failed tests (the first lines of each; the whole output is above)"}, out...)
	if len(out) > maxLines {
		out = append(out[:maxLines], fmt.Sprintf("    ... %d more lines", len(out)-maxLines))
	}
	return out, nil
}

// failures picks the failed tests' own messages out of one package's output.
func failures(block []string) []string {
	var out []string
	found := false
	for i := 0; i < len(block); i++ {
		m := failLine.FindStringSubmatch(block[i])
		if m == nil {
			continue
		}
		found = true
		indent := len(m[1])
		var msg []string
		nested := -1 // the indent of a subtest's line: its block is the subtest's, not this test's
		for j := i + 1; j < len(block); j++ {
			l := block[j]
			if strings.TrimSpace(l) == "" {
				continue
			}
			if leading(l) <= indent {
				break
			}
			if nested >= 0 && leading(l) > nested {
				continue
			}
			nested = -1
			if otherTest.MatchString(l) {
				nested = leading(l)
				continue
			}
			if len(msg) < linesPerTest {
				msg = append(msg, "    "+clip(strings.TrimSpace(l)))
			}
		}
		if len(msg) > 0 {
			out = append(out, "  --- FAIL: "+m[2])
			out = append(out, msg...)
		}
	}
	if found {
		return out
	}
	// No failed test named: the package's own failure (TestMain, a panic, a build error) ends its output.
	var tail []string
	for _, l := range block {
		if strings.TrimSpace(l) != "" && l != "FAIL" {
			tail = append(tail, "    "+clip(strings.TrimSpace(l)))
		}
	}
	for i, l := range tail {
		if strings.HasPrefix(strings.TrimSpace(l), "panic: ") {
			return tail[i:min(i+2, len(tail))]
		}
	}
	return tail[max(0, len(tail)-5):]
}

func leading(s string) int { return len(s) - len(strings.TrimLeft(s, " \t")) }

func clip(s string) string {
	if len(s) > lineWidth {
		return s[:lineWidth] + " ..."
	}
	return s
}
