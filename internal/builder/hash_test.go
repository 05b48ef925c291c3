package builder

import "testing"

// The hash of a fixed spec is pinned: a Manta release that changed it (a new hashed field, another encoding)
// would make every Recreate cluster see a template change and recreate all its pods on the operator upgrade.
// Change the literal only together with a migration that does not recreate.
func TestTemplateHashGolden(t *testing.T) {
	const want = "bjn3ar8ivcc1ohq1hb6km1l59frpm9km"
	if got := TemplateHash(&cluster().Spec); got != want {
		t.Errorf("TemplateHash = %q, want %q: existing pods would be recreated by the operator upgrade", got, want)
	}
}
