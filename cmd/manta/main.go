// Command manta runs Manta: the Ray operator, the REST API server, and the local dev cluster.
package main

import (
	"context"
	goflag "flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/manta-dev/manta/internal/logging"
	"github.com/manta-dev/manta/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCommand()
	root.SetArgs(commandArgs(os.Args[0], os.Args[1:]))
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "manta:", err)
		os.Exit(1)
	}
}

// ownLogger annotates commands that set controller-runtime's logger themselves.
const ownLogger = "manta.dev/own-logger"

// logOptions are the --zap-* flags; `manta dev` reuses them for the log file it writes.
var logOptions zap.Options

func newRootCommand() *cobra.Command {
	zapOpts := &logOptions
	root := &cobra.Command{
		Use:           "manta",
		Short:         "Ray on Kubernetes: operator, REST API server and local dev cluster",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			if cmd.Annotations[ownLogger] != "" {
				return // the command sets the logger itself (controller-runtime takes only the first)
			}
			ctrl.SetLogger(logging.Lazy(zap.New(zap.UseFlagOptions(zapOpts))))
		},
	}
	logFlags := goflag.NewFlagSet("log", goflag.ContinueOnError)
	zapOpts.BindFlags(logFlags)
	root.PersistentFlags().AddGoFlagSet(logFlags)
	// What `manta dev` runs in-process beside the operator.
	devServices = []devService{{name: "apiserver", start: startDevAPIServer}}
	root.AddCommand(newOperatorCommand(), newAPIServerCommand(), newDevCommand(), newVersionCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print Manta's version, commit and the KubeRay API it serves",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			out := cmd.OutOrStdout()
			fmt.Fprintln(out, "manta", version.Version)
			fmt.Fprintln(out, "commit:", version.GitCommit())
			fmt.Fprintf(out, "serves: %s (KubeRay %s), manta.dev/v1alpha1\n", version.KubeRayAPIVersion, version.KubeRayRelease)
		},
	}
}
