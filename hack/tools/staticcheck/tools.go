//go:build tools

// Package tools pins staticcheck, the linter .ci/run runs (bin/staticcheck, built by hack/build-extra-tools.sh;
// its configuration is staticcheck.conf at the repository root).
package tools

import _ "honnef.co/go/tools/cmd/staticcheck"
