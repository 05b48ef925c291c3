// Package version reports Manta's build version.
package version

// Version is set at link time with -X github.com/manta-dev/manta/internal/version.Version=...
var Version = "v0.1.0-dev"
