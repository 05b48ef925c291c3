//go:build tools

// Package tools pins KubeRay's operator, the test oracle that test/oracle compares Manta with. It is a test tool:
// never shipped, never linked into Manta.
package tools

import _ "github.com/ray-project/kuberay/ray-operator"
