// Package netns runs code inside a network namespace without moving the process: only the OS thread that runs it
// enters the namespace, and a socket stays in the namespace it was made in.
package netns

import (
	"errors"
	"fmt"
	"net"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs f on an OS thread moved into the network namespace at path (Named(name) for a named one), and
// moves the thread back before handing it back to the Go scheduler. The thread must not end instead: a process
// started with Pdeathsig (the dev cluster's components) is killed when the thread that forked it ends, and any
// thread of this process may have forked one. Only when it cannot go back does the thread end with its goroutine,
// because the scheduler must never run other goroutines in the namespace.
func Do(path string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("open this thread's network namespace: %w", err)
			return
		}
		defer unix.Close(own)
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("open network namespace %s: %w", path, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter network namespace %s: %w", path, err)
			return
		}
		err = f()
		if berr := unix.Setns(own, unix.CLONE_NEWNET); berr != nil {
			done <- errors.Join(err, fmt.Errorf("leave network namespace %s: %w", path, berr))
			return
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}

// Listen opens a listener (network as net.Listen's) on addr inside the network namespace at path.
func Listen(path, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := Do(path, func() (err error) {
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// Named is the path of the namespace `ip netns add name` made.
func Named(name string) string { return "/run/netns/" + name }
