package integration

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/manta-dev/manta/internal/devcluster/images"
	"github.com/manta-dev/manta/internal/sys/mounts"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestRedisImage checks the Redis image KubeRay's GCS fault-tolerance sample names, then starts its redis-server
// through the image's entrypoint in a chroot of its unpacked layer (a Unix socket only, no TCP port) and pings it.
func TestRedisImage(t *testing.T) {
	ctx := testContext(t, 40*time.Minute)
	imgs, err := images.Ensure(ctx, repoBin(t), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	redis := find(t, imgs, "docker.io/library/redis:7.4.0")
	img := testutil.LayoutImage(t, redis.Path)
	if err := validate.Image(img, validate.Fast); err != nil {
		t.Fatalf("Redis image is not valid: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if strings.Join(c.Entrypoint, " ") != "docker-entrypoint.sh" || strings.Join(c.Cmd, " ") != "redis-server" || c.WorkingDir != "/data" {
		t.Errorf("entrypoint %q, cmd %q, workdir %q; want docker-entrypoint.sh, redis-server, /data as the official image",
			c.Entrypoint, c.Cmd, c.WorkingDir)
	}
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	t.Cleanup(func() {
		if err := mounts.RemoveTree(rootfs); err != nil {
			t.Error(err)
		}
	})
	hdrs := unpack(t, img, rootfs)
	for _, p := range []string{"usr/bin/redis-server", "usr/bin/redis-cli", "usr/bin/sh", "usr/local/bin/docker-entrypoint.sh", "data"} {
		if _, ok := hdrs[p]; !ok {
			t.Errorf("the image has no /%s", p)
		}
	}

	script := `cd /data
docker-entrypoint.sh redis-server --port 0 --unixsocket /tmp/redis.sock --daemonize yes
i=0
until [ "$(redis-cli -s /tmp/redis.sock ping 2>/dev/null)" = PONG ]; do
	i=$((i+1)); [ $i -lt 300 ] || { echo "redis-server did not answer"; exit 1; }; sleep 0.1
done
echo PONG
redis-cli -s /tmp/redis.sock config get protected-mode | tr '\n' ' '; echo
pid=$(redis-cli -s /tmp/redis.sock info server | sed -n 's/^process_id:\([0-9]*\).*/\1/p')
echo "server user: $(stat -c %U /proc/$pid)"
redis-cli -s /tmp/redis.sock shutdown nosave || true
`
	var out []byte
	err = mounts.WithProcAndDev(rootfs, func() error {
		cmd := exec.CommandContext(ctx, "chroot", rootfs, "/usr/bin/env", "-i")
		cmd.Args = append(cmd.Args, c.Env...)
		cmd.Args = append(cmd.Args, "/bin/sh", "-ec", script)
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("redis-server in the image: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "PONG") || !strings.Contains(string(out), "protected-mode no") ||
		!strings.Contains(string(out), "server user: redis") {
		t.Fatalf("redis-server in the image: %q, want PONG, protected-mode no, and the server running as redis", out)
	}
	t.Logf("in the image: %s", strings.TrimSpace(string(out)))
}
