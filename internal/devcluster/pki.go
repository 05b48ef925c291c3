package devcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

type pki struct {
	caCert, servingCert, servingKey string
	saKey, saPub, tokenFile         string
	caPEM                           []byte
	adminToken                      string
	// The real node's credentials (see pkiOptions.node): the API server's client certificate for the kubelet, the
	// kubelet's serving certificate, and tokens for the kubelet, kube-proxy and CoreDNS.
	kubeletClientCert, kubeletClientKey   string
	kubeletServingCert, kubeletServingKey string
	nodeToken, proxyToken, dnsToken       string
}

// pkiOptions shape the certificates: the API server's serving addresses beside 127.0.0.1, and the real node, when
// there is one.
type pkiOptions struct {
	servingIPs []net.IP
	node       *nodeIdentity
}

// nodeIdentity names the real node for its certificates and tokens.
type nodeIdentity struct {
	name string
	ip   net.IP
}

// Users the real node's components authenticate as (tokens in the token file). The kubelet's is what the Node
// authorizer expects; kube-proxy's is bound to system:node-proxier by the API server's bootstrap policy.
const (
	kubeProxyUser = "system:kube-proxy"
	coreDNSUser   = "manta-dev:coredns"
)

func nodeUser(node string) string { return "system:node:" + node }

// writePKI creates a CA, the API server's serving certificate for 127.0.0.1/localhost and o.servingIPs, the
// service-account signing key pair and a token file whose first token is in system:masters; with o.node, the
// real node's certificates and tokens too.
func writePKI(dir string, o pkiOptions) (*pki, error) {
	pkiDir := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{
		caCert:      filepath.Join(pkiDir, "ca.crt"),
		servingCert: filepath.Join(pkiDir, "apiserver.crt"),
		servingKey:  filepath.Join(pkiDir, "apiserver.key"),
		saKey:       filepath.Join(pkiDir, "sa.key"),
		saPub:       filepath.Join(pkiDir, "sa.pub"),
		tokenFile:   filepath.Join(pkiDir, "tokens.csv"),
	}
	now := time.Now()
	ca, caKey, err := p.writeCA(now)
	if err != nil {
		return nil, err
	}
	if err := p.writeServing(now, ca, caKey, o.servingIPs); err != nil {
		return nil, err
	}
	if err := p.writeServiceAccountKeys(); err != nil {
		return nil, err
	}
	if o.node != nil {
		if err := p.writeNodePKI(pkiDir, ca, caKey, o.node); err != nil {
			return nil, err
		}
	}
	if err := p.writeTokens(o.node); err != nil {
		return nil, err
	}
	return p, nil
}

// writeCA creates the cluster's CA and writes its certificate.
func (p *pki) writeCA(now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "manta-dev-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(p.caCert, p.caPEM, 0o644); err != nil {
		return nil, nil, err
	}
	return ca, caKey, nil
}

// writeServing writes the API server's serving certificate and key, for localhost, the kubernetes Service's
// names, 127.0.0.1 and ips.
func (p *pki) writeServing(now time.Time, ca *x509.Certificate, caKey *ecdsa.PrivateKey, ips []net.IP) error {
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses:  append([]net.IP{net.ParseIP("127.0.0.1")}, ips...),
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writePEM(p.servingCert, "CERTIFICATE", srvDER); err != nil {
		return err
	}
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return err
	}
	return writePEM(p.servingKey, "EC PRIVATE KEY", srvKeyDER)
}

// writeServiceAccountKeys writes the key pair that signs and checks service-account tokens.
func (p *pki) writeServiceAccountKeys() error {
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	if err := writePEM(p.saKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)); err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	return writePEM(p.saPub, "PUBLIC KEY", pubDER)
}

// writeTokens writes the token file: the admin's token (system:masters) and, with a real node, its kubelet's,
// kube-proxy's and CoreDNS's.
func (p *pki) writeTokens(node *nodeIdentity) error {
	var err error
	if p.adminToken, err = newToken(); err != nil {
		return err
	}
	lines := fmt.Sprintf("%s,manta-dev-admin,manta-dev-admin,\"system:masters\"\n", p.adminToken)
	if node != nil {
		for _, t := range []struct {
			tok         *string
			user, group string
		}{
			{&p.nodeToken, nodeUser(node.name), "system:nodes"},
			{&p.proxyToken, kubeProxyUser, ""},
			{&p.dnsToken, coreDNSUser, ""},
		} {
			if *t.tok, err = newToken(); err != nil {
				return err
			}
			lines += fmt.Sprintf("%s,%s,%s,\"%s\"\n", *t.tok, t.user, t.user, t.group)
		}
	}
	return os.WriteFile(p.tokenFile, []byte(lines), 0o600)
}

func newToken() (string, error) {
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return "", err
	}
	return hex.EncodeToString(tok), nil
}

// writeNodePKI signs the API server's client certificate for the kubelet (in system:masters, which the kubelet's
// x509 authentication accepts from the dev cluster's CA) and the kubelet's serving certificate for the node's address,
// which the API server checks with --kubelet-certificate-authority.
func (p *pki) writeNodePKI(pkiDir string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, node *nodeIdentity) error {
	p.kubeletClientCert, p.kubeletClientKey = filepath.Join(pkiDir, "apiserver-kubelet-client.crt"), filepath.Join(pkiDir, "apiserver-kubelet-client.key")
	p.kubeletServingCert, p.kubeletServingKey = filepath.Join(pkiDir, "kubelet.crt"), filepath.Join(pkiDir, "kubelet.key")
	now := time.Now()
	for i, c := range []struct {
		tmpl      *x509.Certificate
		cert, key string
	}{
		{&x509.Certificate{
			Subject:     pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}, p.kubeletClientCert, p.kubeletClientKey},
		{&x509.Certificate{
			Subject:     pkix.Name{CommonName: nodeUser(node.name)},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames:    []string{node.name},
			IPAddresses: []net.IP{node.ip},
		}, p.kubeletServingCert, p.kubeletServingKey},
	} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		c.tmpl.SerialNumber = big.NewInt(int64(10 + i))
		c.tmpl.NotBefore, c.tmpl.NotAfter = now.Add(-time.Hour), now.Add(10*365*24*time.Hour)
		c.tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, c.tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		if err := writePEM(c.cert, "CERTIFICATE", der); err != nil {
			return err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(c.key, "EC PRIVATE KEY", keyDER); err != nil {
			return err
		}
	}
	return nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func writeKubeconfig(path, server string, caPEM []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["manta-dev"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["manta-dev-admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["manta-dev"] = &clientcmdapi.Context{Cluster: "manta-dev", AuthInfo: "manta-dev-admin", Namespace: "default"}
	cfg.CurrentContext = "manta-dev"
	return clientcmd.WriteToFile(*cfg, path)
}
