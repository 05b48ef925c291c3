package logging

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	crzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// The stdout encoder and the log file (--log-stdout-encoder, --log-file-path, --log-file-encoder) are honoured: each
// line goes to both, each in its encoder.
func TestOutputs(t *testing.T) {
	for _, c := range []struct {
		stdout, file             string
		stdoutJSON, fileJSON, ok bool
	}{
		{"console", "json", false, true, true},
		{"json", "console", true, false, true},
		{"", "", true, true, true}, // --zap-* defaults (production: JSON); the file's default is JSON
		{"yaml", "", false, false, false},
		{"json", "text", false, false, false},
	} {
		var out bytes.Buffer
		path := filepath.Join(t.TempDir(), "op.log")
		log, closer, err := New(crzap.Options{DestWriter: &out}, Outputs{StdoutEncoder: c.stdout, File: path, FileEncoder: c.file})
		if !c.ok {
			if err == nil {
				t.Errorf("encoders %q/%q accepted", c.stdout, c.file)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		log.WithName("setup").Info("starting", "gates", 3)
		if err := closer.Close(); err != nil {
			t.Fatal(err)
		}
		file, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []struct {
			name string
			line string
			json bool
		}{{"stdout", out.String(), c.stdoutJSON}, {"file", string(file), c.fileJSON}} {
			if !strings.Contains(w.line, "starting") || !strings.Contains(w.line, "setup") {
				t.Errorf("%s %q/%q: %q lacks the line", w.name, c.stdout, c.file, w.line)
			}
			if isJSON := strings.HasPrefix(w.line, "{"); isJSON != w.json {
				t.Errorf("%s %q/%q: JSON %v, want %v: %q", w.name, c.stdout, c.file, isJSON, w.json, w.line)
			}
		}
	}
}

// Without a file, only the stdout encoder applies.
func TestOutputsNoFile(t *testing.T) {
	var out bytes.Buffer
	log, closer, err := New(crzap.Options{DestWriter: &out}, Outputs{StdoutEncoder: "console"})
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello")
	if err := closer.Close(); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.HasPrefix(s, "{") || !strings.Contains(s, "hello") {
		t.Errorf("console line %q", s)
	}
}
