package images

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"os"
	"runtime"
	"sort"
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

// fileEntry is one file of a layer built in memory.
type fileEntry struct {
	name string
	mode int64
	data []byte
}

// filesLayer writes a layer of the given files (root-owned, fixed timestamps, so equal inputs give equal digests).
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
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	for _, fe := range files {
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeReg, Name: fe.name, Mode: fe.mode, Size: int64(len(fe.data)),
			ModTime: time.Unix(0, 0), Format: tar.FormatPAX,
		}); err != nil {
			return err
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
