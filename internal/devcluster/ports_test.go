package devcluster

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortsBelowEphemeral: the ports are distinct, bindable, and outside both Ray's worker ports and the range
// the kernel gives outgoing connections, which could take one before its component binds it.
func TestFreePortsBelowEphemeral(t *testing.T) {
	start := ephemeralStart()
	ports, err := FreePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d handed out twice in %v", p, ports)
		}
		seen[p] = true
		if start-portFloor >= 1000 && (p < portFloor || p >= start) {
			t.Errorf("port %d outside [%d, %d)", p, portFloor, start)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		_ = l.Close()
	}
}
