package images

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// layerFromFile opens a gzip-compressed layer tarball written once, so the layout and every push reuse the same bytes
// instead of compressing again.
func layerFromFile(path string) (v1.Layer, error) {
	l, err := tarball.LayerFromFile(path, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", path, err)
	}
	return l, nil
}

// fileEntry is one file of a layer built in memory: a regular file, a directory (dir) or a hard link to another
// entry (link, the target's name).
type fileEntry struct {
	name string
	mode int64
	data []byte
	dir  bool
	link string
	uid  int // owner (and group), root by default
}

// filesLayer writes a layer of the given files (root-owned unless said, fixed timestamps, so equal inputs give equal digests).
// It sorts files in place.
func filesLayer(out string, files []fileEntry) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	zw, err := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	// By name, hard links last: a link's target must come before it in the archive.
	sort.Slice(files, func(i, j int) bool {
		if li, lj := files[i].link != "", files[j].link != ""; li != lj {
			return lj
		}
		return files[i].name < files[j].name
	})
	for _, fe := range files {
		h := &tar.Header{
			Typeflag: tar.TypeReg, Name: fe.name, Mode: fe.mode, Size: int64(len(fe.data)),
			ModTime: time.Unix(0, 0), Format: tar.FormatPAX, Uid: fe.uid, Gid: fe.uid,
		}
		switch {
		case fe.dir:
			h.Typeflag, h.Name, h.Size = tar.TypeDir, strings.TrimSuffix(fe.name, "/")+"/", 0
		case fe.link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, fe.link, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if _, err := tw.Write(fe.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// writeLayout writes an OCI layout at out holding one image made of layerFiles (bottom first) and cfg, annotated
// with ref as its name.
func writeLayout(out, ref string, cfg v1.Config, layerFiles ...string) error {
	if _, err := parseRef(ref); err != nil {
		return err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, lf := range layerFiles {
		l, err := layerFromFile(lf)
		if err != nil {
			return err
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Config = cfg
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	p, err := layout.Write(out, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref,
		// What `ctr images import` names the image by.
		"io.containerd.image.name": ref,
	}), layout.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
}

// readLayout returns the one image of the layout at path.
func readLayout(path string) (v1.Image, error) {
	p, err := layout.FromPath(path)
	if err != nil {
		return nil, fmt.Errorf("image layout %s: %w", path, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("image layout %s: %w", path, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("image layout %s: %w", path, err)
	}
	if len(im.Manifests) != 1 {
		return nil, fmt.Errorf("image layout %s: %d images, want 1", path, len(im.Manifests))
	}
	img, err := p.Image(im.Manifests[0].Digest)
	if err != nil {
		return nil, fmt.Errorf("image layout %s: %w", path, err)
	}
	return img, nil
}
