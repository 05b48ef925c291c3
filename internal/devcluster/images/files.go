package images

import (
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// File is one file of an image FromFiles writes: a regular file, a directory (Dir) or a hard link (Link).
type File struct {
	Name string // path in the image, without a leading slash
	Mode int64
	Data []byte
	Dir  bool   // a directory (Data is ignored)
	Link string // a hard link to the regular file of this name (without a leading slash)
}

// FromFiles writes a one-layer image of files with config cfg, named ref, as an OCI layout at out (which must not
// exist), for Push: small images a test makes itself, such as Manta's puller image or an image it moves a tag to.
func FromFiles(out, ref string, files []File, cfg v1.Config) (Image, error) {
	if _, err := os.Stat(out); err == nil {
		return Image{}, fmt.Errorf("images: %s exists", out)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return Image{}, err
	}
	entries := make([]fileEntry, len(files))
	for i, f := range files {
		entries[i] = fileEntry{name: f.Name, mode: f.Mode, data: f.Data, dir: f.Dir, link: f.Link}
	}
	lf := out + ".layer.tar.gz"
	defer os.Remove(lf)
	if err := filesLayer(lf, entries); err != nil {
		return Image{}, fmt.Errorf("images: %s: %w", ref, err)
	}
	if err := writeLayout(out, ref, cfg, lf); err != nil {
		return Image{}, fmt.Errorf("images: %s: %w", ref, err)
	}
	return Image{Ref: ref, Path: out}, nil
}
