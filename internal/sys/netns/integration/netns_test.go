package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/manta-dev/manta/internal/sys/netns"
)

// TestDoAndListen: f runs in the namespace and the caller stays outside; a listener made there is in the namespace
// and answers a dial from inside.
func TestDoAndListen(t *testing.T) {
	name := fmt.Sprintf("manta-netns-test-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v: %s", err, out)
	}
	host, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	var inside string
	if err := netns.Do(netns.Named(name), func() (err error) {
		inside, err = os.Readlink("/proc/thread-self/ns/net")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if inside == host {
		t.Fatalf("f ran in the host's namespace %s", host)
	}
	if err := netns.Do(netns.Named(name+"-missing"), func() error { return nil }); err == nil {
		t.Error("Do in a namespace that does not exist succeeded")
	}

	l, err := netns.Listen(netns.Named(name), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan struct{})
	go func() {
		if c, err := l.Accept(); err == nil {
			_ = c.Close()
			close(accepted)
		}
	}()
	// The socket's namespace, by its cookie: unlike a dial from the host, it cannot hit another program's listener
	// that happens to hold the same port on the host's loopback.
	hostL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostL.Close()
	if got, want := cookie(t, l), cookie(t, hostL); got == want {
		t.Errorf("the listener is in the host's namespace (cookie %d), want %s's", got, name)
	}
	if err := netns.Do(netns.Named(name), func() error {
		c, err := net.Dial("tcp", l.Addr().String())
		if err == nil {
			_ = c.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("dial from inside: %v", err)
	}
	<-accepted
	after, _ := os.Readlink("/proc/thread-self/ns/net")
	if after != host {
		t.Errorf("this goroutine's thread is in %s after Do, want the host's %s", after, host)
	}
}

func cookie(t *testing.T, l net.Listener) uint64 {
	t.Helper()
	rc, err := l.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var c uint64
	var serr error
	if err := rc.Control(func(fd uintptr) { c, serr = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_NETNS_COOKIE) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("SO_NETNS_COOKIE: %v", serr)
	}
	return c
}
