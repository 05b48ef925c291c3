package images

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestKilledBuildLeftoversAreCleaned leaves what a killed Ray build leaves (a work directory with proc and /dev
// still mounted in its rootfs) and checks that the next Ensure unmounts and removes it, and builds.
func TestKilledBuildLeftoversAreCleaned(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	bin := t.TempDir()
	if _, err := EnsurePause(ctx, bin, t.Logf); err != nil {
		t.Fatal(err)
	}
	bin, err := filepath.EvalSymlinks(bin)
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(bin, "images", ".work-pause")
	rootfs := filepath.Join(work, "rootfs")
	t.Cleanup(func() { _ = unmountAll(work) })
	mounted := make(chan struct{})
	// withMounts unmounts when fn returns: keep fn running until the "killed" build's mounts have been looked at.
	done := make(chan error, 1)
	release := make(chan struct{})
	go func() {
		done <- withMounts(rootfs, func() error {
			close(mounted)
			<-release
			return nil
		})
	}()
	<-mounted
	mps, err := mountsUnder(work)
	if err != nil || len(mps) != 2 {
		t.Fatalf("mounts under %s: %v (%v), want proc and dev", work, mps, err)
	}
	if err := os.WriteFile(filepath.Join(bin, ".stamps", "image-pause"), []byte("killed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsurePause(ctx, bin, t.Logf); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Logf("the interrupted build's own unmount: %v", err)
	}
	if mps, err := mountsUnder(work); err != nil || len(mps) != 0 {
		t.Fatalf("mounts left under %s: %v (%v)", work, mps, err)
	}
	if _, err := os.Stat(work); !os.IsNotExist(err) {
		t.Fatalf("%s left after the next build: %v", work, err)
	}
}

// TestRemoveTreeDoesNotReachThroughABind bind-mounts a directory from outside into a tree and removes the tree:
// the bind is detached first, so the directory outside keeps its file.
func TestRemoveTreeDoesNotReachThroughABind(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(outside, "keep")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "tree")
	m := filepath.Join(dir, "rootfs", "dev")
	if err := os.MkdirAll(m, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(outside, m, "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(m, syscall.MNT_DETACH) })
	if err := removeTree(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s not removed: %v", dir, err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("removing the tree reached through its bind mount: %v", err)
	}
}
