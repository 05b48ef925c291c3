package ray_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/manta-dev/manta/internal/sys/netns"
)

const ipCmd = "/usr/sbin/ip"

// netnsPrefix names this suite's network namespaces; the creating process's PID follows, so a later run can
// remove namespaces left behind by a run that was killed.
const netnsPrefix = "manta-raytest-"

// podNet is a network namespace joined to the host by a veth pair: HostIP on the host end, PodIP inside.
// The API server refuses to proxy to loopback, so the Ray head is published on PodIP.
type podNet struct {
	Name, HostIf  string
	HostIP, PodIP string
}

func ip(args ...string) error {
	out, err := exec.Command(ipCmd, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// removeStaleNetns deletes namespaces of earlier runs whose process is gone.
func removeStaleNetns() {
	out, err := exec.Command(ipCmd, "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		pid, ok := strings.CutPrefix(name, netnsPrefix)
		if !ok {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue
		}
		_ = ip("netns", "del", name)
		_ = ip("link", "del", "mrt"+pid+"h")
	}
}

// newPodNet creates the namespace and veth pair in a random /30 of 198.19.0.0/16 (inside 198.18.0.0/15, the range
// set aside for benchmarking: no private range is routed in the root namespace), and removes
// them when the test ends.
func newPodNet(t *testing.T) *podNet {
	t.Helper()
	removeStaleNetns()
	pid := strconv.Itoa(os.Getpid())
	n := &podNet{Name: netnsPrefix + pid, HostIf: "mrt" + pid + "h"}
	if len(n.HostIf) > 15 {
		n.HostIf = n.HostIf[:14] + "h"
	}
	peer := strings.TrimSuffix(n.HostIf, "h") + "p"
	for range 20 {
		third, fourth := rand.IntN(256), rand.IntN(64)*4
		n.HostIP = fmt.Sprintf("198.19.%d.%d", third, fourth+1)
		n.PodIP = fmt.Sprintf("198.19.%d.%d", third, fourth+2)
		if out, _ := exec.Command(ipCmd, "-4", "addr", "show", "to", fmt.Sprintf("198.19.%d.%d/30", third, fourth)).Output(); len(bytes.TrimSpace(out)) == 0 {
			break
		}
	}
	t.Cleanup(func() {
		_ = ip("netns", "del", n.Name)
		_ = ip("link", "del", n.HostIf) // gone with the namespace already, normally
	})
	steps := [][]string{
		{"netns", "add", n.Name},
		{"link", "add", n.HostIf, "type", "veth", "peer", "name", peer, "netns", n.Name},
		{"addr", "add", n.HostIP + "/30", "dev", n.HostIf},
		{"link", "set", n.HostIf, "up"},
		{"-n", n.Name, "addr", "add", n.PodIP + "/30", "dev", peer},
		{"-n", n.Name, "link", "set", peer, "up"},
		{"-n", n.Name, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// listen opens a TCP listener inside the namespace.
func (n *podNet) listen(addr string) (net.Listener, error) {
	return netns.Listen(netns.Named(n.Name), "tcp", addr)
}

// forward accepts on podIP:port inside the namespace and relays each connection to target (the Ray head on
// host loopback) until the test ends.
func (n *podNet) forward(t *testing.T, port int, target string) {
	t.Helper()
	l, err := n.listen(net.JoinHostPort(n.PodIP, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = struct{}{}
		} else {
			delete(conns, c)
		}
	}
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					t.Logf("forwarder %s: %v", l.Addr(), err)
				}
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := net.Dial("tcp", target)
				if err != nil {
					_ = in.Close()
					return
				}
				track(in, true)
				track(out, true)
				var pipes sync.WaitGroup
				pipes.Add(2)
				relay := func(dst, src net.Conn) {
					defer pipes.Done()
					_, _ = io.Copy(dst, src)
					if tc, ok := dst.(*net.TCPConn); ok {
						_ = tc.CloseWrite()
					}
				}
				go relay(out, in)
				go relay(in, out)
				pipes.Wait()
				_ = in.Close()
				_ = out.Close()
				track(in, false)
				track(out, false)
			}()
		}
	}()
}
