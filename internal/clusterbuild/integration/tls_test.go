package integration

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/testutil"
)

// The IP wait, run by sh with the machine's openssl against real certificates: it ends once the certificate names
// the pod's IP, and keeps waiting (it says so) for one that names only an IP the pod's is a prefix of.
func TestTLSWaitScript(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatalf("openssl: %v (the Ray image has it; the test needs it too)", err)
	}
	dir := t.TempDir()
	writeCert := func(ips ...string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		for _, ip := range ips {
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The script as the head pod's IP wait runs it.
	c := testutil.MakeRayCluster("ns", "rc").Obj()
	c.Spec.TLSOptions = &rayv1.TLSOptions{Enabled: ptr.To(true)}
	head := clusterbuild.HeadPod(c, clusterbuild.PodOptions{})
	i := slices.IndexFunc(head.Spec.InitContainers, func(x corev1.Container) bool { return x.Name == clusterbuild.TLSWaitInitContainer })
	if i < 0 || len(head.Spec.InitContainers[i].Args) != 1 {
		t.Fatalf("the head pod's init containers %+v, want %s with one script", head.Spec.InitContainers, clusterbuild.TLSWaitInitContainer)
	}
	script := strings.ReplaceAll(head.Spec.InitContainers[i].Args[0], clusterbuild.TLSMountPath, dir)

	writeCert("127.0.0.1", "10.1.2.3")
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "POD_IP=10.1.2.3")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "names 10.1.2.3") {
		t.Fatalf("certificate names the IP: %v: %s", err, out)
	}

	// 10.1.2.30 is not 10.1.2.3: the script must report that it waits, and not end.
	writeCert("127.0.0.1", "10.1.2.30")
	cmd = exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "POD_IP=10.1.2.3")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.Contains(line, "does not name 10.1.2.3 yet") {
		t.Fatalf("first line %q, %v", line, err)
	}
}
