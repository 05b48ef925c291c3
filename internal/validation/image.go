package validation

import "regexp"

// imageRefPattern is the grammar of github.com/distribution/reference (without IPv6 hosts). The ImagePullJob CRD
// checks the same pattern with CEL; Image lets callers (the prepull controller, the REST API) check before creating
// a job.
var imageRefPattern = regexp.MustCompile(`^(([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])([.]([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(:[0-9]+)?/)?[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*)*(:[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$`)

// Image reports whether ref is an image reference the ImagePullJob CRD accepts.
func Image(ref string) bool {
	return len(ref) > 0 && len(ref) <= 512 && imageRefPattern.MatchString(ref)
}
