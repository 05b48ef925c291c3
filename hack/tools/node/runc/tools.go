//go:build tools

// Package tools pins runc, the OCI runtime containerd starts containers with on the dev cluster's real node.
package tools

import (
	_ "github.com/opencontainers/runc"
)
