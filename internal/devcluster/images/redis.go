package images

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/manta-dev/manta/internal/sys/mounts"
)

// RedisRef is the Redis image KubeRay's GCS fault-tolerance sample (ray-cluster.external-redis.yaml) names as
// "redis:7.4.0". It holds Debian bookworm's redis-server (7.0), the Redis this machine can install.
const RedisRef = "docker.io/library/redis:7.4.0"

var (
	redisDebianPackages = []string{"redis-server"}
	// Laid out like the official image: /data the working directory, owned by redis; an entrypoint that turns a
	// leading option or config file into redis-server arguments and drops root to redis.
	redisEntrypoint = `#!/bin/sh
set -e
case "$1" in
-* | *.conf) set -- redis-server "$@" ;;
esac
if [ "$1" = redis-server ]; then
	# The official image's redis-server starts with protected mode off; Debian's has it on, which refuses every
	# client from another pod when no password is set. A config file keeps what it says.
	case " $* " in
	*".conf "* | *" --protected-mode "*) ;;
	*) set -- "$@" --protected-mode no ;;
	esac
	if [ "$(id -u)" = 0 ]; then
		find . \! -user redis -exec chown redis '{}' + 2>/dev/null || true
		exec setpriv --reuid=redis --regid=redis --init-groups "$@"
	fi
fi
exec "$@"
`
	redisSetupScript = `mkdir -p /data /usr/local/etc/redis
chown redis:redis /data
chmod 0755 /usr/local/bin/docker-entrypoint.sh
apt-get clean
`
	redisConfig = v1.Config{
		Entrypoint:   []string{"docker-entrypoint.sh"},
		Cmd:          []string{"redis-server"},
		WorkingDir:   "/data",
		Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		ExposedPorts: map[string]struct{}{"6379/tcp": {}},
	}
)

func redisRecipe() recipe {
	return recipe{
		name: "redis",
		ref:  RedisRef,
		inputs: []string{debianSuite, strings.Join(redisDebianPackages, ","), redisEntrypoint, redisSetupScript,
			configString(redisConfig)},
		build: buildRedis,
	}
}

func buildRedis(ctx context.Context, b *builder, out, work string) error {
	if err := needRoot("the Redis image"); err != nil {
		return err
	}
	rootfs := filepath.Join(work, "rootfs")
	if err := b.debootstrap(ctx, rootfs, redisDebianPackages); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rootfs, "usr/local/bin/docker-entrypoint.sh"), []byte(redisEntrypoint), 0o755); err != nil {
		return err
	}
	if err := mounts.WithProcAndDev(rootfs, func() error { return b.chroot(ctx, rootfs, chrootEnv(), redisSetupScript) }); err != nil {
		return err
	}
	if err := writeEmpty(rootfs, "/etc/resolv.conf", "/etc/hostname"); err != nil {
		return err
	}
	layer := filepath.Join(work, "layer.tar.gz")
	b.progress("packing %s", RedisRef)
	if err := dirLayer(rootfs, layer, baseKeep); err != nil {
		return err
	}
	return writeLayout(out, RedisRef, redisConfig, layer)
}
