package integration

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/manta-dev/manta/internal/devcluster/images"
	"github.com/manta-dev/manta/internal/sys/mounts"
)

// TestKilledBuildLeftoversAreCleaned leaves what a killed Ray build leaves (a work directory with proc and /dev
// still mounted in its rootfs) and checks that the next Ensure unmounts and removes it, and builds.
func TestKilledBuildLeftoversAreCleaned(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	bin := t.TempDir()
	if _, err := images.EnsurePause(ctx, bin, t.Logf); err != nil {
		t.Fatal(err)
	}
	bin, err := filepath.EvalSymlinks(bin)
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(bin, "images", ".work-pause")
	rootfs := filepath.Join(work, "rootfs")
	t.Cleanup(func() { _ = mounts.UnmountAll(work) })
	mounted := make(chan struct{})
	// WithProcAndDev unmounts when fn returns: keep fn running until the "killed" build's mounts have been looked at.
	done := make(chan error, 1)
	release := make(chan struct{})
	go func() {
		done <- mounts.WithProcAndDev(rootfs, func() error {
			close(mounted)
			<-release
			return nil
		})
	}()
	<-mounted
	mps, err := mounts.Under(work)
	if err != nil || len(mps) != 2 {
		t.Fatalf("mounts under %s: %v (%v), want proc and dev", work, mps, err)
	}
	if err := os.WriteFile(filepath.Join(bin, ".stamps", "image-pause"), []byte("killed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := images.EnsurePause(ctx, bin, t.Logf); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Logf("the interrupted build's own unmount: %v", err)
	}
	if mps, err := mounts.Under(work); err != nil || len(mps) != 0 {
		t.Fatalf("mounts left under %s: %v (%v)", work, mps, err)
	}
	if _, err := os.Stat(work); !os.IsNotExist(err) {
		t.Fatalf("%s left after the next build: %v", work, err)
	}
}
