// Package integration runs ownpages against this kernel, in the test's own process.
package integration

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/manta-dev/manta/internal/sys/ownpages"
)

// TestReleaseLowersResidentPages pages out the test binary's own code and read-only data and reads the resident
// kilobytes of those mappings from /proc/self/smaps before and after.
func TestReleaseLowersResidentPages(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	maps, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	ranges, err := ownpages.ReadOnlyMappings(maps, exe)
	maps.Close()
	if err != nil || len(ranges) == 0 {
		t.Fatalf("read-only mappings of %s: %v, %v", exe, ranges, err)
	}
	// Start from the state of a fresh process whatever ran before in this one (-count, a rerun): advice back to
	// normal, every page of the mappings resident.
	for _, r := range ranges {
		for _, advice := range []uintptr{unix.MADV_NORMAL, unix.MADV_POPULATE_READ} {
			if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.Start, r.End-r.Start, advice); errno != 0 {
				t.Fatalf("madvise(%d) %#x-%#x: %v", advice, r.Start, r.End, errno)
			}
		}
	}
	before, size, random := residentKiB(t, ranges)
	if random {
		t.Fatal("the read-only mappings are marked for random reads (smaps VmFlags rr) before Release")
	}
	if before != size {
		t.Fatalf("%d of the %d KiB of %s's read-only mappings resident after MADV_POPULATE_READ", before, size, exe)
	}
	n, err := ownpages.Release()
	if err != nil {
		t.Fatal(err)
	}
	if n != size*1024 {
		t.Errorf("Release advised %d bytes, the read-only mappings span %d KiB", n, size)
	}
	var after int64
	after, _, random = residentKiB(t, ranges)
	t.Logf("%s: %d KiB mapped read-only, resident %d KiB before Release, %d KiB after", exe, size, before, after)
	// What the test runs between the two reads (this function, the runtime, smaps' reading) comes back at once;
	// the rest of what the binary's start touched does not.
	if after >= before/2 {
		t.Errorf("resident %d KiB after Release, %d KiB before: less than half given back", after, before)
	}
	if !random {
		t.Error("the read-only mappings are not marked for random reads (smaps VmFlags rr)")
	}
}

// residentKiB sums Rss and Size over the mappings in ranges from /proc/self/smaps, and says whether every one of
// them is advised for random reads (VmFlags rr).
func residentKiB(t *testing.T, ranges []ownpages.Range) (rss, size int64, random bool) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in, seen := false, 0
	random = true
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		// A mapping's header starts with its address range; its keys ("Rss:", "VmFlags:") follow.
		if lo, hi, ok := strings.Cut(fields[0], "-"); ok {
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = slices.Contains(ranges, ownpages.Range{Start: uintptr(start), End: uintptr(end)})
				if in {
					seen++
				}
				continue
			}
		}
		if !in {
			continue
		}
		if fields[0] == "VmFlags:" {
			random = random && slices.Contains(fields[1:], "rr")
			continue
		}
		kib, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "Rss:":
			rss += kib
		case "Size:":
			size += kib
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != len(ranges) {
		t.Fatalf("smaps lists %d of the %d read-only mappings", seen, len(ranges))
	}
	return rss, size, random
}
