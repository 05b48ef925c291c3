// Command images is `make images`: it builds the dev cluster's real-node images into bin/images (see
// internal/devcluster/images), and only the pause image when not root, since the others need debootstrap and chroot.
// With -manta it is `make image`: Manta's own image (the Dockerfile's, built without Docker) into bin/images/manta.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/devcluster/images"
)

func main() {
	log.SetFlags(0)
	manta := flag.Bool("manta", false, "build Manta's image from this repository instead of the dev cluster's images")
	flag.Parse()
	bin := "bin"
	if flag.NArg() > 0 {
		bin = flag.Arg(0)
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch {
	case *manta:
		root, rerr := devcluster.RepoRoot()
		if rerr != nil {
			log.Fatal(rerr)
		}
		var img images.Image
		if img, err = images.EnsureManta(ctx, bin, root, log.Printf); err == nil {
			log.Printf("make image: %s in %s", img.Ref, img.Path)
		}
	case os.Geteuid() != 0:
		log.Printf("make images: not root, so only the pause image is built (the Ray and Redis images need debootstrap and chroot)")
		_, err = images.EnsurePause(ctx, bin, log.Printf)
	default:
		_, err = images.Ensure(ctx, bin, log.Printf)
	}
	if err != nil {
		log.Fatal(err)
	}
}
