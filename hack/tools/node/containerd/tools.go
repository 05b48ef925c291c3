//go:build tools

// Package tools pins containerd, its runc shim and ctr for the dev cluster's real node; a module of its own so containerd's dependency versions are the ones it was released with.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
