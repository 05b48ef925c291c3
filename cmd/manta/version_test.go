package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/manta-dev/manta/internal/version"
)

// TestVersion: `manta version` prints the version, the commit it was built from and the KubeRay API it serves.
func TestVersion(t *testing.T) {
	old := version.Commit
	version.Commit = "0123456789abcdef"
	t.Cleanup(func() { version.Commit = old })
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	want := "manta " + version.Version + "\ncommit: 0123456789abcdef\nserves: ray.io/v1 (KubeRay v1.5.0), manta.dev/v1alpha1\n"
	if out.String() != want {
		t.Errorf("manta version printed\n%s\nwant\n%s", out.String(), want)
	}
	if !strings.HasPrefix(version.Version, "v") {
		t.Errorf("version %q does not start with v", version.Version)
	}
}
