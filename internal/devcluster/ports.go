package devcluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// portFloor is the lowest port FreePorts hands out: below it are Ray's worker ports (10002-19999 by default) and
// well-known services.
const portFloor = 20000

// FreePorts returns n distinct TCP ports free on 127.0.0.1, chosen at random between portFloor and the start of the
// kernel's ephemeral range (net.ipv4.ip_local_port_range). A port is only free until the caller's component binds
// it. Inside the ephemeral range every outgoing connection on the machine competes for it in that window, and a
// test run makes thousands; below it only another caller picking the same port at random does. Where the ephemeral
// range leaves too little room below it, the kernel chooses.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	lo, hi := portFloor, ephemeralStart()-1
	ports := make([]int, 0, n)
	for len(ports) < n {
		var l net.Listener
		var err error
		if hi-lo < 1000 {
			l, err = net.Listen("tcp", "127.0.0.1:0")
		} else {
			for try := 0; try < 200; try++ {
				if l, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(lo+rand.IntN(hi-lo+1))); err == nil {
					break
				}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("devcluster: no free port between %d and %d: %w", lo, hi, err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ephemeralStart is the first port of the kernel's ephemeral range (32768 when it cannot be read, Linux's default).
func ephemeralStart() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 0 {
				return v
			}
		}
	}
	return 32768
}
