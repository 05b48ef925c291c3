//go:build tools

// Package tools pins CoreDNS, the cluster DNS of the dev cluster's real node, with its default plugin set.
package tools

import (
	_ "github.com/coredns/coredns"
)
