package apiserver_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/manta-dev/manta/internal/apiserver"
	"github.com/manta-dev/manta/internal/apiserver/apiservertest"
)

// writeCert writes a fresh self-signed certificate for 127.0.0.1 and its key into dir, and returns a pool trusting
// it.
func writeCert(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "manta-apiserver-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// noKube is a rest.Config for servers whose tests never reach Kubernetes.
var noKube = &rest.Config{Host: "https://127.0.0.1:1"}

// The server speaks HTTPS with the configured certificate (TLS 1.2 or later), refuses plain HTTP, and picks up a
// renewed certificate without a restart.
func TestSecurityTLS(t *testing.T) {
	dir := t.TempDir()
	pool := writeCert(t, dir)
	if _, err := apiserver.New(noKube, apiserver.Options{Auth: apiserver.AuthNone, TLSCertFile: filepath.Join(dir, "tls.crt")}); err == nil {
		t.Fatal("a certificate without a key was accepted")
	}
	s, err := apiserver.New(noKube, apiserver.Options{Auth: apiserver.AuthNone, TLSCertFile: filepath.Join(dir, "tls.crt"), TLSKeyFile: filepath.Join(dir, "tls.key")})
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(apiservertest.NewLoopbackServer(t, s), "http://")
	get := func(c *http.Client, url string) (int, error) {
		res, err := c.Get(url)
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		_, _ = io.Copy(io.Discard, res.Body)
		return res.StatusCode, nil
	}
	client := func(cfg *tls.Config) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	}

	if code, err := get(client(&tls.Config{RootCAs: pool}), "https://"+addr+"/healthz"); err != nil || code != 200 {
		t.Fatalf("HTTPS with the CA trusted: %d %v", code, err)
	}
	if code, err := get(&http.Client{Timeout: 10 * time.Second}, "http://"+addr+"/healthz"); err == nil && code == 200 {
		t.Fatal("plain HTTP was served")
	}
	if _, err := get(client(&tls.Config{}), "https://"+addr+"/healthz"); err == nil {
		t.Fatal("a client not trusting the certificate connected")
	}
	if _, err := get(client(&tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS11}), "https://"+addr+"/healthz"); err == nil {
		t.Fatal("TLS 1.1 was accepted")
	}

	// A renewed certificate is served once the next look at the files sees it.
	old := filepath.Join(t.TempDir(), "old.crt")
	if err := os.Rename(filepath.Join(dir, "tls.crt"), old); err != nil {
		t.Fatal(err)
	}
	newPool := writeCert(t, dir)
	later := time.Now().Add(time.Minute)
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Chtimes(filepath.Join(dir, f), later, later); err != nil {
			t.Fatal(err)
		}
	}
	apiserver.RecheckCertificates(s)
	if code, err := get(client(&tls.Config{RootCAs: newPool}), "https://"+addr+"/healthz"); err != nil || code != 200 {
		t.Fatalf("HTTPS with the renewed certificate: %d %v", code, err)
	}
}
