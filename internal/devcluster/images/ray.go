package images

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/manta-dev/manta/internal/sys/mounts"
)

// RayRef is the Ray image Manta's samples name ("rayproject/ray:2.52.0" normalizes to it).
const RayRef = "docker.io/rayproject/ray:2.52.0"

// The Ray image follows rayproject/ray where KubeRay and Manta rely on it: user ray (uid 1000, gid 100 "users"),
// HOME and the working directory /home/ray, Python under /home/ray/anaconda3/bin first on PATH (here a venv, owned
// by ray so `pip install` works as in the real image), bash and wget (KubeRay's probes run wget).
const (
	rayHome = "/home/ray"
	rayVenv = rayHome + "/anaconda3"
	rayUID  = "1000"
	rayGID  = "100"
	rayPath = rayVenv + "/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

var (
	rayDebianPackages = []string{"python3", "python3-venv", "bash", "wget", "ca-certificates"}
	// protobuf<7: Ray 2.52's Serve reads FieldDescriptor.label, which protobuf 7 removed.
	rayPipPackages = []string{"ray[default,serve]==2.52.0", "protobuf<7"}
	rayBaseScript  = `useradd --create-home --home-dir ` + rayHome + ` --shell /bin/bash --uid ` + rayUID + ` --gid ` + rayGID + ` ray
apt-get clean
`
	rayVenvScript = `python3 -m venv ` + rayVenv + `
` + rayVenv + `/bin/pip install --no-cache-dir --disable-pip-version-check --progress-bar off ` + shellQuote(rayPipPackages) + `
` + rayVenv + `/bin/ray --version
chown -R ` + rayUID + `:` + rayGID + ` ` + rayVenv + `
`
	rayConfig = v1.Config{
		User:       rayUID,
		WorkingDir: rayHome,
		Env:        []string{"PATH=" + rayPath, "HOME=" + rayHome, "LANG=C.UTF-8", "LC_ALL=C.UTF-8"},
		Cmd:        []string{"/bin/bash"},
	}
)

func rayRecipe() recipe {
	return recipe{
		name: "ray",
		ref:  RayRef,
		inputs: []string{debianSuite, strings.Join(rayDebianPackages, ","), rayBaseScript, rayVenvScript,
			configString(rayConfig)},
		build: buildRay,
	}
}

// buildRay builds two layers, the Debian base and the Ray venv, so a pull and the registry show each apart.
func buildRay(ctx context.Context, b *builder, out, work string) error {
	if err := needRoot("the Ray image"); err != nil {
		return err
	}
	rootfs := filepath.Join(work, "rootfs")
	if err := b.debootstrap(ctx, rootfs, rayDebianPackages); err != nil {
		return err
	}
	env := chrootEnv()
	if err := mounts.WithProcAndDev(rootfs, func() error { return b.chroot(ctx, rootfs, env, rayBaseScript) }); err != nil {
		return err
	}
	if err := writeEmpty(rootfs, "/etc/resolv.conf", "/etc/hostname"); err != nil {
		return err
	}
	base := filepath.Join(work, "base.tar.gz")
	b.progress("packing the Debian base layer of %s", RayRef)
	if err := dirLayer(rootfs, base, baseKeep); err != nil {
		return err
	}
	b.progress("installing %s in a venv at %s", strings.Join(rayPipPackages, " "), rayVenv)
	err := withBuildFiles(rootfs, func() error {
		return mounts.WithProcAndDev(rootfs, func() error { return b.chroot(ctx, rootfs, env, rayVenvScript) })
	})
	if err != nil {
		return err
	}
	venv := filepath.Join(work, "ray.tar.gz")
	b.progress("packing the Ray layer of %s", RayRef)
	rel := strings.TrimPrefix(rayVenv, "/")
	if err := dirLayer(rootfs, venv, func(p string) bool {
		return hasPrefixPath(p, rel) || strings.HasPrefix(rel, p+"/")
	}); err != nil {
		return err
	}
	return writeLayout(out, RayRef, rayConfig, base, venv)
}

// shellQuote quotes each word for sh.
func shellQuote(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// configString is an image config as a recipe input.
func configString(c v1.Config) string {
	b, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("image config %+v: %v", c, err))
	}
	return string(b)
}
