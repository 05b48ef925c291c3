package mounts

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

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
	if err := RemoveTree(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s not removed: %v", dir, err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("removing the tree reached through its bind mount: %v", err)
	}
}
