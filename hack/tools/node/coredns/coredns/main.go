// Command coredns is CoreDNS with the plugins a cluster's DNS uses (those of kubeadm's default Corefile, and bind
// and log, which the dev cluster's Corefile adds) instead of CoreDNS's default set of about sixty, as CoreDNS
// documents for builds with a chosen plugin set. The default set links the AWS, Azure and Google Cloud SDKs, etcd's
// client, QUIC and a tracer: minutes of a cold `make tools` on 2 cores for plugins the node never loads.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives is the order the plugins run in, as CoreDNS's own list (core/dnsserver/zdirectives.go) has them.
var directives = []string{
	"reload",
	"bind",
	"ready",
	"health",
	"prometheus",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"kubernetes",
	"loop",
	"forward",
}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
