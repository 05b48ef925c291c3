package images

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/manta-dev/manta/internal/sys/mounts"
)

// debianSuite is the Debian release every rootfs is built from; the machine's own apt source must carry it.
const debianSuite = "bookworm"

// aptSourceFiles are where the machine's apt sources are read from (deb822 and one-line formats).
var aptSourceFiles = []string{"/etc/apt/sources.list.d/*.sources", "/etc/apt/sources.list", "/etc/apt/sources.list.d/*.list"}

// debianMirror returns the URI of the machine's apt source that carries suite, the only Debian archive this
// machine is known to reach.
func debianMirror(suite string) (string, error) {
	var files []string
	for _, g := range aptSourceFiles {
		m, _ := filepath.Glob(g)
		files = append(files, m...)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var uri string
		if strings.HasSuffix(f, ".sources") {
			uri = mirrorDeb822(string(data), suite)
		} else {
			uri = mirrorOneLine(string(data), suite)
		}
		if uri != "" {
			return uri, nil
		}
	}
	return "", fmt.Errorf("no apt source for Debian %q in %s", suite, strings.Join(aptSourceFiles, ", "))
}

func mirrorDeb822(data, suite string) string {
	for _, stanza := range strings.Split(data, "\n\n") {
		fields := map[string]string{}
		for _, line := range strings.Split(stanza, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if ok {
				fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
			}
		}
		if fields["enabled"] == "no" || !contains(strings.Fields(fields["types"]), "deb") ||
			!contains(strings.Fields(fields["suites"]), suite) {
			continue
		}
		if uris := strings.Fields(fields["uris"]); len(uris) > 0 {
			return uris[0]
		}
	}
	return ""
}

func mirrorOneLine(data, suite string) string {
	sc := bufio.NewScanner(strings.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") { // options, possibly several words
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) > 0 {
				f = f[1:]
			}
		}
		if len(f) >= 2 && f[1] == suite {
			return f[0]
		}
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// needRoot says why a rootfs cannot be built when this process is not root.
func needRoot(what string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("building %s needs root (debootstrap and chroot); run as root", what)
	}
	return nil
}

// ensureDebootstrap installs Debian's debootstrap package when it is missing.
func (b *builder) ensureDebootstrap(ctx context.Context) error {
	if _, err := exec.LookPath("debootstrap"); err == nil {
		return nil
	}
	b.progress("installing debootstrap with apt-get")
	install := func() error { return b.run(ctx, "apt-get", "install", "-y", "--no-install-recommends", "debootstrap") }
	if err := install(); err != nil {
		// A machine whose package lists were cleaned knows no package until it updates them.
		if uerr := b.run(ctx, "apt-get", "update"); uerr != nil {
			return fmt.Errorf("apt-get update: %w", uerr)
		}
		if err := install(); err != nil {
			return fmt.Errorf("apt-get install debootstrap: %w", err)
		}
	}
	return nil
}

// debootstrap builds a minimal Debian rootfs with include at dir, keeping the downloaded packages in a cache under
// <bin>/images so a rebuild downloads nothing it already has.
func (b *builder) debootstrap(ctx context.Context, dir string, include []string) error {
	if err := b.ensureDebootstrap(ctx); err != nil {
		return err
	}
	mirror, err := debianMirror(debianSuite)
	if err != nil {
		return err
	}
	cache := filepath.Join(b.binDir, "images", ".cache", "debs")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return err
	}
	b.progress("debootstrap %s from %s", debianSuite, mirror)
	err = b.run(ctx, "debootstrap", "--variant=minbase", "--include="+strings.Join(include, ","),
		"--cache-dir="+cache, debianSuite, dir, mirror)
	// debootstrap mounts proc and sys in the target for its second stage and may leave them on failure.
	if uerr := mounts.UnmountAll(dir); uerr != nil && err == nil {
		err = uerr
	}
	if err != nil {
		return fmt.Errorf("debootstrap: %w", err)
	}
	return nil
}

// run runs a command, naming it and its last output lines on failure.
func (b *builder) run(ctx context.Context, name string, args ...string) error {
	return b.runEnv(ctx, nil, name, args...)
}

func (b *builder) runEnv(ctx context.Context, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	if env != nil {
		cmd.Env = env
	}
	cmd.Env = append(cmd.Environ(), "DEBIAN_FRONTEND=noninteractive")
	tail := &tailBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = tail, tail
	// Its own process group, so a cancelled build kills pip and everything else it started, not only the command.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail.String())
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(bytes.TrimSpace(t.buf)) }

// chrootEnv is the environment of commands run in a rootfs: nothing of this process's but what the build needs to
// reach PyPI the way this machine does (proxies and pip's settings).
func chrootEnv(extra ...string) []string {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root", "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "DEBIAN_FRONTEND=noninteractive",
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "PIP_CERT", k == "PIP_FIND_LINKS":
			// The bundle is copied to the rootfs's own path below; wheel directories of the machine are not there.
		case strings.HasPrefix(k, "PIP_"),
			contains([]string{"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"}, k):
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// buildFiles are the machine's files a build in a rootfs needs to reach PyPI as this machine does, each copied to
// the same path in the rootfs and put back afterwards: DNS, the CA bundle this machine trusts (the network may
// re-sign TLS; Debian's own bundle then fails), and pip's configuration (the index to use).
var buildFiles = []string{
	"/etc/resolv.conf",
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pip.conf",
	"/etc/xdg/pip/pip.conf",
	"/root/.config/pip/pip.conf",
	"/root/.pip/pip.conf",
}

// withBuildFiles copies buildFiles into rootfs, runs fn, and restores what the rootfs had, whatever fn returns.
func withBuildFiles(rootfs string, fn func() error) (err error) {
	type saved struct {
		path, link string // link: the rootfs had a symlink there
		data       []byte
		mode       os.FileMode
		had        bool
	}
	var restore []saved
	defer func() {
		for i := len(restore) - 1; i >= 0; i-- {
			s := restore[i]
			rerr := os.Remove(s.path)
			if errors.Is(rerr, os.ErrNotExist) {
				rerr = nil
			}
			switch {
			case rerr != nil:
			case s.link != "":
				rerr = os.Symlink(s.link, s.path)
			case s.had:
				rerr = os.WriteFile(s.path, s.data, s.mode)
			}
			if rerr != nil && err == nil {
				err = fmt.Errorf("restore %s: %w", s.path, rerr)
			}
		}
	}()
	for _, p := range buildFiles {
		data, rerr := os.ReadFile(p)
		if errors.Is(rerr, os.ErrNotExist) {
			continue
		}
		if rerr != nil {
			return rerr
		}
		dst := filepath.Join(rootfs, p)
		s := saved{path: dst}
		if fi, lerr := os.Lstat(dst); lerr == nil {
			s.had = true
			if fi.Mode()&os.ModeSymlink != 0 {
				// Replaced, not written through: a symlink would make the copy land outside the path restored.
				if s.link, err = os.Readlink(dst); err != nil {
					return err
				}
			} else if s.data, err = os.ReadFile(dst); err != nil {
				return err
			}
			s.mode = fi.Mode().Perm()
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		restore = append(restore, s)
		if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return err
		}
	}
	return fn()
}

// chroot runs script with /bin/sh in rootfs.
func (b *builder) chroot(ctx context.Context, rootfs string, env []string, script string) error {
	return b.runEnv(ctx, env, "chroot", rootfs, "/bin/sh", "-ec", script)
}

// writeEmpty replaces path in rootfs with an empty file: /etc/resolv.conf and /etc/hostname are the runtime's to
// fill, and debootstrap copied the machine's into the rootfs.
func writeEmpty(rootfs string, paths ...string) error {
	for _, p := range paths {
		dst := filepath.Join(rootfs, p)
		if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.WriteFile(dst, nil, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// baseKeep says which paths of a rootfs belong in its base layer: everything but the contents of the pseudo file
// systems and scratch directories the runtime provides, and the package caches.
func baseKeep(rel string) bool {
	for _, d := range []string{"proc", "sys", "dev", "run", "tmp", "var/tmp", "var/cache/apt", "var/lib/apt/lists", "var/log"} {
		if strings.HasPrefix(rel, d+"/") {
			return false
		}
	}
	return true
}
