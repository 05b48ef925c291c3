// Command images is `make images`: it builds the dev cluster's real-node images into bin/images (see
// internal/devcluster/images), and only the pause image when not root, since the others need debootstrap and chroot.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/manta-dev/manta/internal/devcluster/images"
)

func main() {
	log.SetFlags(0)
	bin := "bin"
	if len(os.Args) > 1 {
		bin = os.Args[1]
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if os.Geteuid() != 0 {
		log.Printf("make images: not root, so only the pause image is built (the Ray and Redis images need debootstrap and chroot)")
		_, err = images.EnsurePause(ctx, bin, log.Printf)
	} else {
		_, err = images.Ensure(ctx, bin, log.Printf)
	}
	if err != nil {
		log.Fatal(err)
	}
}
