// Package integration runs ownpages against this kernel, in the test's own process.
package integration

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/manta-dev/manta/internal/sys/ownpages"
)

// TestReleaseLowersResidentPages pages out the test binary's own code and read-only data and reads the resident
// kilobytes of those mappings from /proc/self/smaps before and after.
func TestReleaseLowersResidentPages(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	before, size, random := residentKiB(t, exe)
	if random {
		t.Fatal("the read-only mappings are marked for random reads (smaps VmFlags rr) before Release")
	}
	if before == 0 {
		t.Fatalf("none of %s's read-only mappings is resident", exe)
	}
	n, err := ownpages.Release()
	if err != nil {
		t.Fatal(err)
	}
	if n != size*1024 {
		t.Errorf("Release advised %d bytes, the read-only mappings span %d KiB", n, size)
	}
	var after int64
	after, _, random = residentKiB(t, exe)
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

// residentKiB sums Rss and Size over the read-only mappings of path in /proc/self/smaps, and says whether every
// one of them is advised for random reads (VmFlags rr).
func residentKiB(t *testing.T, path string) (rss, size int64, random bool) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	random = true
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if strings.Contains(fields[0], "-") && len(fields) >= 5 && !strings.HasSuffix(fields[0], ":") {
			parts := strings.SplitN(line, " ", 6)
			in = len(parts) == 6 && strings.TrimLeft(parts[5], " ") == path && parts[1][1] != 'w'
			continue
		}
		if !in || len(fields) < 2 {
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
	return rss, size, random && size > 0
}
