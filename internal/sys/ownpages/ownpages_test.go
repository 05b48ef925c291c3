package ownpages

import (
	"strings"
	"testing"
)

func TestReadOnlyMappings(t *testing.T) {
	maps := `00400000-01746000 r-xp 00000000 fe:00 9986127                            /opt/manta/bin/manta
01746000-02b61000 r--p 01346000 fe:00 9986127                            /opt/manta/bin/manta
02b61000-02c01000 rw-p 02761000 fe:00 9986127                            /opt/manta/bin/manta
02c01000-02c40000 rw-p 00000000 00:00 0
c000000000-c004000000 rw-p 00000000 00:00 0
7f0000000000-7f0000001000 r--p 00000000 fe:00 1234                       /opt/manta/bin/manta-other
7f0000002000-7f0000003000 r-xp 00000000 fe:00 77                         /tmp/a b (deleted)
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
`
	got, err := ReadOnlyMappings(strings.NewReader(maps), "/opt/manta/bin/manta")
	if err != nil {
		t.Fatal(err)
	}
	want := []Range{{0x400000, 0x1746000}, {0x1746000, 0x2b61000}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %#v, want %#v", got, want)
	}
	// A replaced executable: its path carries " (deleted)", as /proc/self/exe's link does.
	got, err = ReadOnlyMappings(strings.NewReader(maps), "/tmp/a b (deleted)")
	if err != nil || len(got) != 1 || got[0] != (Range{0x7f0000002000, 0x7f0000003000}) {
		t.Fatalf("deleted path: got %#v, %v", got, err)
	}
	if _, err := ReadOnlyMappings(strings.NewReader("zz-01 r-xp 0 fe:00 1 /x\n"), "/x"); err == nil {
		t.Fatal("a bad address range was accepted")
	}
}
