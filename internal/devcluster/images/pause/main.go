// Command pause is the pod sandbox process of the dev cluster's real node: it holds the pod's namespaces open until
// the runtime stops it. The images package embeds this file and builds it, statically, into the
// registry.k8s.io/pause image, because no registry on the internet is reachable from the dev cluster.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (manta dev)")
		return
	}
	// Buffered so a burst of child exits is not lost while a reap is under way.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	// A child that exited before Notify sent a SIGCHLD nobody handled: the kernel drops a signal the init of a PID
	// namespace has no handler for, and no other comes for that child.
	reap()
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		// Killed by the runtime: exit cleanly, as the kubelet expects of a sandbox.
		os.Exit(0)
	}
}

// reap collects every exited child: with a shared PID namespace the sandbox is PID 1, and orphans become its children.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
