// Package mounts finds, makes and removes the mounts of a directory tree that a build chroots into: proc and a
// minimal /dev for the chroot, and every mount below a tree detached before the tree is removed, so a removal never
// reaches through a bind.
package mounts

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// Under returns the mount points at or below dir, deepest first, from /proc/self/mountinfo.
func Under(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of mountinfo's path fields.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%3o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// UnmountAll detaches every mount at or below dir (a killed build may have left proc or dev mounted in a rootfs).
func UnmountAll(dir string) error {
	mps, err := Under(dir)
	if err != nil {
		return err
	}
	for _, mp := range mps {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
			return fmt.Errorf("unmount %s: %w", mp, err)
		}
	}
	if left, err := Under(dir); err != nil || len(left) > 0 {
		return fmt.Errorf("still mounted under %s: %v (%v)", dir, left, err)
	}
	return nil
}

// RemoveTree unmounts everything under dir and removes it. It refuses to remove while anything is still mounted,
// so a bind or proc mount can never make it delete outside dir.
func RemoveTree(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(dir); os.IsNotExist(err) {
		return nil
	}
	if err := UnmountAll(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// WithProcAndDev mounts proc and a minimal /dev in rootfs for fn and unmounts them whatever fn returns. /dev is a tmpfs
// of its own, not a bind of the machine's, so even a failed unmount can never expose the machine's devices to a
// later removal of the rootfs.
func WithProcAndDev(rootfs string, fn func() error) (err error) {
	defer func() {
		if uerr := UnmountAll(rootfs); uerr != nil && err == nil {
			err = uerr
		}
	}()
	proc, dev := filepath.Join(rootfs, "proc"), filepath.Join(rootfs, "dev")
	for _, d := range []string{proc, dev} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := syscall.Mount("proc", proc, "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount proc in %s: %w", rootfs, err)
	}
	if err := syscall.Mount("tmpfs", dev, "tmpfs", syscall.MS_NOSUID, "mode=755,size=1m"); err != nil {
		return fmt.Errorf("mount /dev in %s: %w", rootfs, err)
	}
	for _, n := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}} {
		devno := int(n.major<<8 | n.minor)
		if err := syscall.Mknod(filepath.Join(dev, n.name), syscall.S_IFCHR|0o666, devno); err != nil {
			return fmt.Errorf("mknod /dev/%s in %s: %w", n.name, rootfs, err)
		}
	}
	for _, l := range [][2]string{{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}} {
		if err := os.Symlink(l[0], filepath.Join(dev, l[1])); err != nil {
			return err
		}
	}
	if err := os.Mkdir(filepath.Join(dev, "shm"), 0o1777); err != nil {
		return err
	}
	return fn()
}
