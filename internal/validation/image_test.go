package validation

import "testing"

func TestImage(t *testing.T) {
	for _, ok := range []string{"busybox", "rayproject/ray:2.9.0", "localhost:5000/a/b:c", "a.b.c/d-e/f__g:1.0-rc",
		"rayproject/ray@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"} {
		if !Image(ok) {
			t.Errorf("Image(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", "Ray:latest", "ray:", "ray:-x", "-ray", "ray@sha256:xyz", "a//b", "ray tag", "ray:latest:latest"} {
		if Image(bad) {
			t.Errorf("Image(%q) = true", bad)
		}
	}
}
