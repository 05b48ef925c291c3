package apiserver

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// CheckServing refuses to serve where it would be unsafe: auth none anywhere but loopback (every caller would act
// with this server's Kubernetes identity), and plain HTTP on a non-loopback address without InsecureHTTP (callers'
// bearer tokens, which kube-apiserver accepts too, would cross the network in the clear), and --anonymous-as on plain
// HTTP beyond loopback (see docs/operations.md).
func CheckServing(addr string, o Options) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	loopback := isLoopback(host)
	if o.Auth == AuthNone && !loopback {
		return fmt.Errorf("auth none lets every caller act with this server's Kubernetes identity, so it serves only on a loopback address (127.0.0.1, ::1 or localhost), not %q; use auth kubernetes", addr)
	}
	if o.AnonymousAs != "" && o.TLSCertFile == "" && !loopback {
		return fmt.Errorf("--anonymous-as gives every request without a token the rights of ServiceAccount %s, so it serves only on a loopback address or over this server's own TLS (--tls-cert-file), not plain HTTP on %q", o.AnonymousAs, addr)
	}
	if o.TLSCertFile == "" && !o.InsecureHTTP && !loopback {
		return fmt.Errorf("plain HTTP on %q would carry callers' bearer tokens (which Kubernetes accepts too) in the clear: give a TLS certificate and key (--tls-cert-file, --tls-key-file), or allow plain HTTP (--insecure-http) when a TLS-terminating proxy or service mesh is in front", addr)
	}
	return nil
}

// isLoopback: "localhost" or an address in 127.0.0.0/8 or ::1. An empty host, 0.0.0.0 and :: listen on every
// interface.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	host, _, _ = strings.Cut(host, "%") // an IPv6 zone
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// certCheckInterval is how often the certificate files are looked at for a change.
const certCheckInterval = 10 * time.Second

// certReloader serves a certificate from files and loads them again when their modification times change. A
// change that does not load (a key written before its certificate) keeps the previous pair until the next look.
type certReloader struct {
	certFile, keyFile string
	log               logr.Logger

	mu               sync.Mutex
	cert             *tls.Certificate
	certMod, keyMod  time.Time
	checked          time.Time
	lastReloadFailed bool
}

func newCertReloader(certFile, keyFile string, log logr.Logger) (*certReloader, error) {
	c := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	if err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *certReloader) load() error {
	cm, km, err := c.modTimes()
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("TLS certificate: %w", err)
	}
	c.cert, c.certMod, c.keyMod, c.checked = &cert, cm, km, time.Now()
	return nil
}

func (c *certReloader) modTimes() (time.Time, time.Time, error) {
	ci, err := os.Stat(c.certFile)
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("TLS certificate: %w", err)
	}
	ki, err := os.Stat(c.keyFile)
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("TLS key: %w", err)
	}
	return ci.ModTime(), ki.ModTime(), nil
}

func (c *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.checked) < certCheckInterval {
		return c.cert, nil
	}
	c.checked = time.Now()
	cm, km, err := c.modTimes()
	if err == nil && cm.Equal(c.certMod) && km.Equal(c.keyMod) {
		return c.cert, nil
	}
	if err == nil {
		err = c.load()
	}
	if err != nil {
		if !c.lastReloadFailed {
			c.log.Error(err, "could not reload the TLS certificate; serving the previous one")
		}
		c.lastReloadFailed = true
		return c.cert, nil
	}
	c.lastReloadFailed = false
	c.log.Info("reloaded the TLS certificate", "file", c.certFile)
	return c.cert, nil
}

func (c *certReloader) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.getCertificate}
}
