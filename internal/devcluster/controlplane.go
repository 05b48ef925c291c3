package devcluster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
)

// startControlPlane starts the control plane on fresh ports with fresh certificates: etcd, then kube-apiserver
// (waited for until ready), then kube-scheduler. kube-controller-manager starts later (startControllerManager),
// once the CRDs are installed.
func (c *Cluster) startControlPlane(ctx context.Context) error {
	serviceCIDR := kwokServiceCIDR
	if c.node != nil {
		serviceCIDR = c.node.net.serviceCIDR
	}
	pki, err := c.writeControlPlanePKI(serviceCIDR)
	if err != nil {
		return err
	}
	ports, err := FreePorts(3)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	c.apiPort = apiPort
	c.Server = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	etcdURL, err := c.startEtcd(ctx, etcdClient, etcdPeer)
	if err != nil {
		return err
	}
	if err := c.startAPIServer(ctx, pki, etcdURL, apiPort, serviceCIDR); err != nil {
		return err
	}
	if err := c.writeKubeconfigs(pki); err != nil {
		return err
	}
	if err := c.waitHealthy(ctx, "/readyz", 3*time.Minute); err != nil {
		return fmt.Errorf("kube-apiserver did not become ready: %w (log: %s)", err, c.logPath("kube-apiserver"))
	}
	return c.startScheduler(ctx)
}

// writeControlPlanePKI writes the cluster's certificates and tokens, serving the API server's ClusterIP in
// serviceCIDR (and the real node's address, with a real node).
func (c *Cluster) writeControlPlanePKI(serviceCIDR netip.Prefix) (*pki, error) {
	pkiOpts := pkiOptions{}
	if c.node != nil {
		pkiOpts.node = &nodeIdentity{name: RealNodeName, ip: net.IP(c.node.net.nodeIP.Addr().AsSlice())}
		pkiOpts.servingIPs = append(pkiOpts.servingIPs, net.IP(c.node.net.nodeIP.Addr().AsSlice()))
	}
	// Pods reach the API server through the kubernetes Service's ClusterIP, the first of the range.
	pkiOpts.servingIPs = append(pkiOpts.servingIPs, net.IP(firstIP(serviceCIDR).AsSlice()))
	pki, err := writePKI(c.dir, pkiOpts)
	if err != nil {
		return nil, err
	}
	c.pki = pki
	return pki, nil
}

// startEtcd starts etcd on the client and peer ports and returns its client URL.
func (c *Cluster) startEtcd(ctx context.Context, clientPort, peerPort int) (string, error) {
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	return etcdURL, c.run(ctx, "etcd",
		"--name=manta-dev",
		"--data-dir="+filepath.Join(c.dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=manta-dev="+peerURL,
		"--listen-metrics-urls=", // no extra listener
		"--unsafe-no-fsync=true",
		"--quota-backend-bytes=8589934592",
		"--log-level=warn",
	)
}

// startAPIServer starts kube-apiserver on 127.0.0.1:apiPort in front of etcdURL.
func (c *Cluster) startAPIServer(ctx context.Context, pki *pki, etcdURL string, apiPort int, serviceCIDR netip.Prefix) error {
	apiArgs := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--service-cluster-ip-range=" + serviceCIDR.String(),
	}
	if c.node != nil {
		// The API server listens on 127.0.0.1 only; the node's namespace reaches it through a forwarder on the
		// node's address and the same port (startForwarder), which is what the kubernetes Service leads to.
		apiArgs = append(apiArgs,
			"--advertise-address="+c.node.net.nodeIP.Addr().String(),
			"--endpoint-reconciler-type=lease",
			"--authorization-mode=Node,RBAC",
			"--kubelet-client-certificate="+pki.kubeletClientCert,
			"--kubelet-client-key="+pki.kubeletClientKey,
			"--kubelet-certificate-authority="+pki.caCert,
			"--kubelet-preferred-address-types=InternalIP",
		)
	} else {
		apiArgs = append(apiArgs,
			"--advertise-address=127.0.0.1",
			// Loopback cannot back the kubernetes Service's endpoints; nothing on fake nodes needs them.
			"--endpoint-reconciler-type=none",
			"--authorization-mode=RBAC",
		)
	}
	return c.run(ctx, "kube-apiserver", append(apiArgs,
		"--tls-cert-file="+pki.servingCert, "--tls-private-key-file="+pki.servingKey,
		"--client-ca-file="+pki.caCert,
		"--token-auth-file="+pki.tokenFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki.saPub,
		"--service-account-signing-key-file="+pki.saKey,
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--allow-privileged=true",
		"--max-requests-inflight=1000",
		"--max-mutating-requests-inflight=500",
		"--profiling="+strconv.FormatBool(c.opts.Profiling),
		"--v="+map[bool]string{false: "0", true: "2"}[c.opts.LogSlowRequests],
	)...)
}

// writeKubeconfigs sets the admin client configuration and writes it as the cluster's kubeconfig, and to
// Options.KubeconfigPath when set.
func (c *Cluster) writeKubeconfigs(pki *pki) error {
	c.config = &rest.Config{
		Host:            c.Server,
		BearerToken:     pki.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: pki.caPEM},
		QPS:             500,
		Burst:           1000,
	}
	c.Kubeconfig = filepath.Join(c.dir, "kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, c.Server, pki.caPEM, pki.adminToken); err != nil {
		return err
	}
	if c.opts.KubeconfigPath != "" {
		if err := os.MkdirAll(filepath.Dir(c.opts.KubeconfigPath), 0o755); err != nil {
			return err
		}
		if err := writeKubeconfig(c.opts.KubeconfigPath, c.Server, pki.caPEM, pki.adminToken); err != nil {
			return err
		}
	}
	return nil
}

// startScheduler starts kube-scheduler against the ready API server.
func (c *Cluster) startScheduler(ctx context.Context) error {
	return c.run(ctx, "kube-scheduler",
		"--kubeconfig="+c.Kubeconfig,
		"--authentication-kubeconfig="+c.Kubeconfig,
		"--authorization-kubeconfig="+c.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=0", // nothing reads its health endpoints; one port less to race for
		"--leader-elect=false",
		"--kube-api-qps=500", "--kube-api-burst=1000",
		"--v=0",
	)
}

// startControllerManager starts kube-controller-manager. It runs after the CRDs are established because its garbage
// collector reads the API's resources when it starts and again only every 30 seconds: started before them, it would
// leave the pods and Services of a RayCluster deleted in a new cluster's first half minute in place until then.
func (c *Cluster) startControllerManager(ctx context.Context) error {
	pki := c.pki
	return c.run(ctx, "kube-controller-manager",
		"--kubeconfig="+c.Kubeconfig,
		"--authentication-kubeconfig="+c.Kubeconfig,
		"--authorization-kubeconfig="+c.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--leader-elect=false",
		"--service-account-private-key-file="+pki.saKey,
		"--root-ca-file="+pki.caCert,
		"--use-service-account-credentials=false",
		"--cluster-name=manta-dev",
		"--kube-api-qps=500", "--kube-api-burst=1000",
		// Fake nodes have no kubelet; keep them from being marked unreachable between kwok heartbeats.
		"--node-monitor-grace-period=2m",
		"--v=0",
	)
}
