//go:build tools

// Package tools pins Helm, whose CLI renders charts/manta in the chart tests (bin/helm, built by
// hack/build-extra-tools.sh). Helm stays out of Manta's own go.mod: its dependency tree is large.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
