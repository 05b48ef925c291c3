package devcluster

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// stateRoot records every real node the machine runs: slot k holds node-k.lock (flocked by the process that runs
// the node, for as long as it runs) and node-k.json (what the node made that outlives a killed process). /run is
// emptied at boot, as are the namespaces and mounts it describes.
const stateRoot = "/run/manta-dev"

// slotRecord is what a cleanup needs to find everything a real node made: its slot names the namespace, link,
// cgroups and files; its directory holds every mount (containerd's snapshots, the kubelet's volumes, the pods'
// network namespaces) and is named in the command line of every containerd shim the node started.
type slotRecord struct {
	Slot int    `json:"slot"`
	Dir  string `json:"dir"` // the node's directory: <cluster dir>/node
	PID  int    `json:"pid"` // the process that ran the node
}

// slotLock is a held slot.
type slotLock struct {
	net  nodeNet
	file *os.File
}

func slotPaths(k int) (lock, record string) {
	base := filepath.Join(stateRoot, "node-"+strconv.Itoa(k))
	return base + ".lock", base + ".json"
}

// acquireSlot takes the first free slot, after cleaning what killed runs left in every slot nobody holds. dir is
// recorded before anything is made, so a run killed at any point can be cleaned.
func acquireSlot(ctx context.Context, dir string, logf func(string, ...any)) (*slotLock, error) {
	if err := os.MkdirAll(stateRoot, 0o755); err != nil {
		return nil, fmt.Errorf("devcluster: real node state: %w", err)
	}
	var held *slotLock
	for k := 0; k < realNodeSlots; k++ {
		lockPath, recPath := slotPaths(k)
		f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, fmt.Errorf("devcluster: real node slot %d: %w", k, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = f.Close()
			continue // a running node
		}
		if err := cleanSlot(ctx, k, logf); err != nil {
			_ = f.Close()
			if held != nil {
				held.release()
			}
			return nil, err
		}
		if held != nil {
			_ = f.Close()
			continue
		}
		b, err := json.Marshal(slotRecord{Slot: k, Dir: dir, PID: os.Getpid()})
		if err == nil {
			err = os.WriteFile(recPath, b, 0o644)
		}
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("devcluster: real node slot %d: %w", k, err)
		}
		held = &slotLock{net: slotNet(k), file: f}
	}
	if held == nil {
		return nil, fmt.Errorf("devcluster: all %d real node slots are in use (%s/node-*.lock held by running dev clusters)", realNodeSlots, stateRoot)
	}
	return held, nil
}

// release forgets the slot's record (its node is gone) and unlocks it.
func (s *slotLock) release() {
	s.forget()
	_ = s.file.Close()
}

// forget removes the slot's record: nothing of its node is left to clean.
func (s *slotLock) forget() {
	_, rec := slotPaths(s.net.slot)
	_ = os.Remove(rec)
}

// SweepRealNodes cleans what killed real-node runs left on the machine (containers, shims, mounts, namespaces,
// links, routes, cgroups), skipping slots that a running dev cluster holds. Start calls it before anything else.
func SweepRealNodes(ctx context.Context, logf func(string, ...any)) error {
	if _, err := os.Stat(stateRoot); err != nil {
		return nil
	}
	for k := 0; k < realNodeSlots; k++ {
		lockPath, _ := slotPaths(k)
		f, err := os.OpenFile(lockPath, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			err = cleanSlot(ctx, k, logf)
		}
		_ = f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// cleanSlot removes everything slot k's record names. The caller holds the slot's lock.
func cleanSlot(ctx context.Context, k int, logf func(string, ...any)) error {
	_, recPath := slotPaths(k)
	b, err := os.ReadFile(recPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var rec slotRecord
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		return fmt.Errorf("devcluster: real node record %s: %w", recPath, err)
	}
	took, err := cleanNode(ctx, slotNet(k), rec.Dir)
	if err != nil {
		return err
	}
	logf("devcluster: removed what a real node left when its process (pid %d) died: slot %d, %s (%s)", rec.PID, k, rec.Dir, took)
	return os.Remove(recPath)
}

// cleanNode removes what a real node made, in the order that lets each step succeed: its containers' processes
// (every process in its cgroups) and containerd's shims, then the mounts under dir, the network, the cgroups and
// the files outside dir. The node's own daemons are stopped by then (or died with their parent). It says how long each
// step took.
func cleanNode(ctx context.Context, n nodeNet, dir string) (took string, _ error) {
	var errs []error
	var steps []string
	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"containers", func() error { return killCgroupTree(ctx, n.cgroupParent) }},
		{"shims", func() error { return killShims(ctx, dir) }},
		{"mounts", func() error { return unmountUnder(dir) }},
		{"network", func() error { return n.tearDown(ctx) }},
		{"cgroups", func() error { return removeCgroupTree(n.cgroupParent) }},
		{"files", func() error {
			err := errors.Join(os.RemoveAll(n.resolvConfDir), removeOutsideFiles(n, dir))
			_ = os.Remove(filepath.Dir(n.resolvConfDir)) // /etc/netns, when no other namespace has files there
			return err
		}},
	} {
		start := time.Now()
		if err := step.do(); err != nil {
			errs = append(errs, err)
		}
		steps = append(steps, fmt.Sprintf("%s %s", step.name, time.Since(start).Round(time.Millisecond)))
	}
	return strings.Join(steps, ", "), errors.Join(errs...)
}

// cgroupMounts returns the mount points of every cgroup hierarchy (v1 controllers and the unified one).
func cgroupMounts() ([]string, error) {
	mounts, err := readMountInfo()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			out = append(out, m.point)
		}
	}
	return out, nil
}

// killCgroupTree kills every process in the cgroup named parent (in any hierarchy) and waits until they are gone.
func killCgroupTree(ctx context.Context, parent string) error {
	roots, err := cgroupMounts()
	if err != nil {
		return err
	}
	return poll(ctx, time.Minute, func() (bool, error) {
		alive := 0
		for _, r := range roots {
			_ = filepath.WalkDir(filepath.Join(r, parent), func(p string, d os.DirEntry, err error) error {
				if err != nil || !d.IsDir() {
					return nil
				}
				b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
						alive++
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				return nil
			})
		}
		return alive == 0, nil
	})
}

// removeCgroupTree removes the cgroup named parent and its children in every hierarchy, deepest first.
func removeCgroupTree(parent string) error {
	roots, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range roots {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(r, parent), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// killShims kills the containerd shims whose command line names a socket under dir (the shims of this node's
// containerd, which outlive it by design) and removes the sockets they leave in containerd's fixed directory.
func killShims(ctx context.Context, dir string) error {
	type shim struct {
		pid     int
		sockets []string
	}
	find := func() []shim {
		var out []shim
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err != nil {
				continue
			}
			args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
			if filepath.Base(args[0]) != "containerd-shim-runc-v2" {
				continue
			}
			flags := map[string]string{}
			for i := 1; i+1 < len(args); i++ {
				if strings.HasPrefix(args[i], "-") {
					flags[strings.TrimLeft(args[i], "-")] = args[i+1]
				}
			}
			if !strings.HasPrefix(flags["address"], dir+"/") {
				continue
			}
			// containerd names a shim's socket by the hash of <containerd socket>/<namespace>/<id>.
			base := filepath.Join(flags["address"], flags["namespace"], flags["id"])
			s := shim{pid: pid}
			for _, p := range []string{base, filepath.Join(base, "debug")} {
				s.sockets = append(s.sockets, filepath.Join(shimSocketDir, fmt.Sprintf("%x", sha256.Sum256([]byte(p)))))
			}
			out = append(out, s)
		}
		return out
	}
	var sockets []string
	err := poll(ctx, 30*time.Second, func() (bool, error) {
		shims := find()
		for _, s := range shims {
			_ = syscall.Kill(s.pid, syscall.SIGKILL)
			sockets = append(sockets, s.sockets...)
		}
		return len(shims) == 0, nil
	})
	for _, s := range sockets {
		_ = os.Remove(s)
	}
	return err
}

// shimSocketDir is where containerd's shims listen, whatever containerd's state directory.
const shimSocketDir = "/run/containerd/s"

type mountEntry struct{ point, fstype string }

func readMountInfo() ([]mountEntry, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []mountEntry
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		// Fields after the optional ones: " - fstype source options".
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(f) {
			continue
		}
		out = append(out, mountEntry{point: unescapeMount(f[4]), fstype: f[sep+1]})
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder detaches every mount at or below dir, deepest first, until none is left.
func unmountUnder(dir string) error {
	if dir == "" || dir == "/" {
		return fmt.Errorf("devcluster: refusing to unmount under %q", dir)
	}
	for round := 0; ; round++ {
		mounts, err := readMountInfo()
		if err != nil {
			return err
		}
		var under []string
		for _, m := range mounts {
			if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
				under = append(under, m.point)
			}
		}
		if len(under) == 0 {
			return nil
		}
		if round == 10 {
			return fmt.Errorf("devcluster: mounts left under %s: %s", dir, strings.Join(under, ", "))
		}
		sort.Slice(under, func(i, j int) bool { return len(under[i]) > len(under[j]) })
		for _, p := range under {
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	}
}

// removeOutsideFiles removes the files a node writes outside its directory, where the kubelet and the CNI
// library have fixed paths: CNI's cached results for the node's network, and the kubelet's symlinks to container
// logs under dir.
func removeOutsideFiles(n nodeNet, dir string) error {
	var errs []error
	results, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", n.cniNetwork+"-*"))
	for _, r := range results {
		if err := os.Remove(r); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, dir+"/") {
			if err := os.Remove(l); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func writeFile(path, content string) error {
	return os.WriteFile(path, []byte(content), 0o644)
}
