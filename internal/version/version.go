// Package version reports Manta's build version, commit and the KubeRay API it serves.
package version

import "runtime/debug"

// Version is Manta's version; charts/manta's version and appVersion follow it (checked by test/deploy). Release
// builds set it at link time with -X github.com/manta-dev/manta/internal/version.Version=...
var Version = "v0.1.0-dev"

// Commit is the git commit the binary was built from, set at link time (make build does) with
// -X github.com/manta-dev/manta/internal/version.Commit=...; empty means the one Go recorded, if any.
var Commit = ""

// KubeRayAPI is the KubeRay API Manta serves: its group/version and the KubeRay release whose CRDs ray.io/v1
// accepts unchanged (the release the oracle tests pin in hack/tools/kuberay).
const (
	KubeRayAPIVersion = "ray.io/v1"
	KubeRayRelease    = "v1.5.0"
)

// GitCommit returns Commit, else the revision Go stamped into the binary (go build with VCS stamping), else
// "unknown".
func GitCommit() string {
	if Commit != "" {
		return Commit
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}
