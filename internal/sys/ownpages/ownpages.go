// Package ownpages gives back the pages of the process's own executable that only its start needed.
//
// A Go binary's code and read-only data are file-backed mappings: each page the process touches is resident and
// counted in its RSS, and the kernel maps up to 64 KiB of neighbours (fault-around) with every fault. Starting the
// operator runs every package's initialisation, the scheme's registrations and the caches' first lists, and
// leaves about 34 MiB of the binary resident (docs/benchmarks.md, "Why peak RSS at 500 clusters is not half"),
// much of which it never runs again. Release asks the kernel to reclaim those pages (madvise MADV_PAGEOUT, Linux
// 5.4 and later) and, first, to expect the mappings to be read at random (MADV_RANDOM), so that a page the
// operator runs later is read back alone on its first use, without the readahead and fault-around that would map
// its neighbours too. A page another process also maps (a second replica of the same image on the node) is left
// alone by the kernel.
package ownpages

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Range is one mapping of the executable: [Start, End).
type Range struct{ Start, End uintptr }

// Release advises the kernel that the executable's read-only mappings are read at random and to page them out,
// and returns the bytes they span.
func Release() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	ranges, err := ReadOnlyMappings(f, exe)
	if err != nil {
		return 0, err
	}
	if len(ranges) == 0 {
		return 0, fmt.Errorf("no read-only mapping of %s in /proc/self/maps", exe)
	}
	var n int64
	for _, r := range ranges {
		for _, a := range []struct {
			advice uintptr
			name   string
		}{{unix.MADV_RANDOM, "MADV_RANDOM"}, {unix.MADV_PAGEOUT, "MADV_PAGEOUT"}} {
			if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.Start, r.End-r.Start, a.advice); errno != 0 {
				return n, fmt.Errorf("madvise(%s) %#x-%#x: %w", a.name, r.Start, r.End, errno)
			}
		}
		n += int64(r.End - r.Start)
	}
	return n, nil
}

// ReadOnlyMappings reads a /proc/<pid>/maps listing and returns the mappings of the file path that are not
// writable (code and read-only data; a writable mapping's written pages are the process's own, not the file's).
func ReadOnlyMappings(maps io.Reader, path string) ([]Range, error) {
	var out []Range
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		// address perms offset dev inode pathname; the pathname may hold spaces, and ends " (deleted)" when the
		// file was replaced, as /proc/self/exe's link then does.
		fields := strings.SplitN(sc.Text(), " ", 6)
		if len(fields) < 6 || strings.TrimLeft(fields[5], " ") != path {
			continue
		}
		if len(fields[1]) < 2 || fields[1][1] == 'w' {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("maps: bad address range %q", fields[0])
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("maps: bad address range %q", fields[0])
		}
		out = append(out, Range{uintptr(start), uintptr(end)})
	}
	return out, sc.Err()
}
