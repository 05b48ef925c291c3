// Package liveproc tells whether one process, not merely its pid, still exists. A pid is free for reuse as soon as
// its process is reaped, and where pid_max is 32768 a test run that starts thousands of processes hands a stopped
// component's pid to another program within seconds. A pid with the process's start time
// names one process for as long as the machine runs.
package liveproc

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ID is one process: its pid and its start time (clock ticks after boot, field 22 of /proc/<pid>/stat).
type ID struct {
	PID   int
	Start uint64
}

// Of is the process that has pid now; ok is false when no process has it.
func Of(pid int) (id ID, ok bool) {
	start, err := startTime(pid)
	if err != nil {
		return ID{}, false
	}
	return ID{PID: pid, Start: start}, true
}

// Exists reports whether the process id names still exists (a zombie not yet reaped included): its pid is taken
// and by a process that started when it did.
func (id ID) Exists() bool {
	start, err := startTime(id.PID)
	return err == nil && start == id.Start
}

// String is "pid@start", the form Parse reads.
func (id ID) String() string { return strconv.Itoa(id.PID) + "@" + strconv.FormatUint(id.Start, 10) }

// Parse reads what String wrote.
func Parse(s string) (ID, error) {
	pid, start, ok := strings.Cut(strings.TrimSpace(s), "@")
	if !ok {
		return ID{}, fmt.Errorf("liveproc: %q is not pid@start", s)
	}
	p, err := strconv.Atoi(pid)
	if err != nil || p <= 0 {
		return ID{}, fmt.Errorf("liveproc: pid in %q", s)
	}
	st, err := strconv.ParseUint(start, 10, 64)
	if err != nil {
		return ID{}, fmt.Errorf("liveproc: start time in %q", s)
	}
	return ID{PID: p, Start: st}, nil
}

func startTime(pid int) (uint64, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 20 {
		return 0, errors.New("liveproc: short stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// Children lists the processes whose parent is pid now, zombies included.
func Children(pid int) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	parent := strconv.Itoa(pid)
	var kids []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f, err := statFields(p); err == nil && len(f) > 1 && f[1] == parent { // exited meanwhile: not listed
			kids = append(kids, p)
		}
	}
	return kids, nil
}

// Zombie reports whether the process with pid has ended and waits to be reaped by its parent.
func Zombie(pid int) bool {
	f, err := statFields(pid)
	return err == nil && len(f) > 0 && f[0] == "Z"
}

// statFields are the fields of /proc/<pid>/stat after the command name: the name, in parentheses, may hold spaces
// and parentheses, so they start after the last ')', with field 3 (state), then ppid.
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil, errors.New("liveproc: unreadable stat")
	}
	return strings.Fields(string(b[i+1:])), nil
}
