package clusterbuild

import "testing"

// The hashes of a fixed spec are pinned: a Manta release that changed them (a new hashed field, another encoding)
// would make every Recreate cluster see a template change and recreate all its pods on the operator upgrade.
// Change the literals only together with a migration that does not recreate.
func TestTemplateHashesGolden(t *testing.T) {
	got := Hashes(&cluster().Spec)
	const head = "k2ib3m52bp148genpnnoijot6uoolkk3"
	if got.Head != head {
		t.Errorf("head hash = %q, want %q: existing pods would be recreated by the operator upgrade", got.Head, head)
	}
	want := map[string]string{"small": "iuh64qit7flnml1u1oef7bfunf2msqjj"}
	for g, h := range want {
		if got.Workers[g] != h {
			t.Errorf("hash of group %s = %q, want %q: existing pods would be recreated by the operator upgrade", g, got.Workers[g], h)
		}
	}
}
