// Command puller is the tiny static program an ImagePullJob's puller pod runs inside the target image. Its only job
// is to start and exit 0: by then the kubelet has pulled the image. It is built with CGO_ENABLED=0 so it runs in
// images without a shell or libc (scratch, distroless, Alpine).
//
//	puller                 print a line and exit 0
//	puller install <dst>   copy this executable to dst (mode 0755); the init container runs this from Manta's image,
//	                       so Manta's image needs no cp or shell either
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "install" {
		if err := install(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "puller:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: puller [install <dst>]")
		os.Exit(2)
	}
	fmt.Println("image pulled")
}

func install(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".puller-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
