package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/manta-dev/manta/internal/devcluster"
)

func TestChooseRealNode(t *testing.T) {
	var out bytes.Buffer
	if _, err := chooseRealNode("yes", &out); err == nil || !strings.Contains(err.Error(), "--real-node") {
		t.Errorf(`--real-node=yes: %v, want an error naming the flag`, err)
	}
	if on, err := chooseRealNode("false", &out); on || err != nil || out.Len() != 0 {
		t.Errorf("--real-node=false: %v %v %q, want off, silently", on, err, out.String())
	}
	bin, err := devcluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	why := devcluster.RealNodeSupport(bin)
	on, err := chooseRealNode("auto", &out)
	switch {
	case why == nil && (!on || err != nil):
		t.Errorf("--real-node=auto on a machine that allows it: %v %v", on, err)
	case why != nil && (on || err != nil || strings.Count(out.String(), "\n") != 1 || !strings.Contains(out.String(), why.Error())):
		t.Errorf("--real-node=auto where %v: %v %v, printed %q; want off and one line saying why", why, on, err, out.String())
	}
}

// TestDevInstallFlag: --install takes process or helm; helm refuses --real-node=false and the in-process
// operator's flags, which the chart's values replace.
func TestDevInstallFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error; "" for none
	}{
		{args: nil},
		{args: []string{"--install=process", "--reconcile-concurrency=2"}},
		{args: []string{"--install=helm"}},
		{args: []string{"--install=helm", "--real-node=true"}},
		{args: []string{"--install=docker"}, want: `--install: "docker" is not process or helm`},
		{args: []string{"--install=helm", "--real-node=false"}, want: "needs --real-node=auto or true"},
		{args: []string{"--install=helm", "--reconcile-concurrency=2", "--qps=5"}, want: "--install=helm: --qps, --reconcile-concurrency configure the in-process operator"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := newDevCommand()
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			var f devFlags
			f.install, _ = cmd.Flags().GetString("install")
			f.realNode, _ = cmd.Flags().GetString("real-node")
			err := checkInstall(cmd, &f)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}
