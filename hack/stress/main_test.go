package main

import (
	"strings"
	"testing"
)

func TestReadEvents(t *testing.T) {
	stream := strings.Join([]string{
		`{"Action":"run","Package":"p/a","Test":"TestX"}`,
		`{"Action":"output","Package":"p/a","Test":"TestX","Output":"=== RUN TestX\n"}`,
		`{"Action":"output","Package":"p/a","Test":"TestX/sub","Output":"x_test.go:9: timed out waiting\n"}`,
		`{"Action":"fail","Package":"p/a","Test":"TestX/sub","Elapsed":3}`,
		`{"Action":"fail","Package":"p/a","Test":"TestX","Elapsed":3}`,
		`{"Action":"pass","Package":"p/a","Test":"TestY","Elapsed":1}`,
		`{"Action":"fail","Package":"p/a","Elapsed":4.5}`,
		`{"Action":"pass","Package":"p/b","Elapsed":9}`,
		`{"Action":"output","Package":"p/c","Output":"panic: boom\n"}`,
		`{"Action":"fail","Package":"p/c","Elapsed":0.5}`,
	}, "\n")
	var r round
	readEvents(strings.NewReader(stream), &r)
	if len(r.failed) != 2 {
		t.Fatalf("failed = %+v; want TestX/sub of p/a and p/c itself", r.failed)
	}
	if f := r.failed[0]; f.pkg != "p/a" || f.test != "TestX/sub" || len(f.tail) != 1 || !strings.Contains(f.tail[0], "timed out") {
		t.Errorf("first failure %+v; want p/a TestX/sub with its output", f)
	}
	if f := r.failed[1]; f.pkg != "p/c" || f.test != "" || len(f.tail) != 1 || f.tail[0] != "panic: boom" {
		t.Errorf("second failure %+v; want package p/c with its panic", f)
	}
	if len(r.packages) != 3 || r.packages[0].pkg != "p/b" || r.packages[1].pkg != "p/a" || r.packages[1].result != "FAIL" {
		t.Errorf("packages %+v; want p/b, p/a (FAIL), p/c, slowest first", r.packages)
	}
	if s := summary([]round{r}, 1); !strings.Contains(s, "### FAIL p/a TestX/sub") || !strings.Contains(s, "p/b 9s (ok)") {
		t.Errorf("summary does not name the failure and the slowest package:\n%s", s)
	}
}

func TestAppendTailKeepsTheLastLines(t *testing.T) {
	var lines []string
	for i := range tailLines + 5 {
		lines = appendTail(lines, strings.Repeat("x", i))
	}
	if len(lines) != tailLines || len(lines[0]) != 5 {
		t.Errorf("kept %d lines starting with length %d; want %d starting with length 5", len(lines), len(lines[0]), tailLines)
	}
}
