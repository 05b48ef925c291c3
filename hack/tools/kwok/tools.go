//go:build tools

// Package tools pins kwok, which runs the dev cluster's fake nodes.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
