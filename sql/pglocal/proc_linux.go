package pglocal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr returns the process attributes of initdb and postgres: run as
// cred (when not nil), and killed by the kernel (SIGKILL) when this process
// dies, so a crash never leaves a server behind. Backends exit on their own
// once their postmaster is gone.
//
// The kernel delivers the parent-death signal when the thread that started
// the child exits; Go only ends threads of goroutines that exit while locked
// to one (runtime.LockOSThread), so Start must not be called from such a
// goroutine. Go sets the signal after switching credentials, which would
// otherwise clear it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Credential: cred,
		Pdeathsig:  syscall.SIGKILL,
	}
}

// processAlive reports whether pid names a running (not zombie) process.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	// A zombie has exited but not been reaped (inside a container, PID 1 may
	// never reap orphans); it holds no port and no files.
	state, _ := procStat(pid)
	return state != "Z" && state != "X"
}

// processStartTime returns the start time of pid in clock ticks since boot,
// or "" when unknown. With the pid, it identifies a process across pid reuse.
func processStartTime(pid int) string {
	_, startTime := procStat(pid)
	return startTime
}

// procStat returns the state (field 3) and start time (field 22) from
// /proc/PID/stat, or empty strings when unavailable.
func procStat(pid int) (state, startTime string) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", ""
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return "", ""
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (state), fields[19] is field 22 (starttime).
	if len(fields) < 20 {
		return "", ""
	}
	return fields[0], fields[19]
}

// isPostmasterOf reports whether pid runs with dataDir as its data directory,
// so that a stale postmaster.pid never gets an unrelated process killed.
func isPostmasterOf(pid int, dataDir string) bool {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return false
	}
	for arg := range strings.SplitSeq(string(data), "\x00") {
		if arg == dataDir {
			return true
		}
	}
	return false
}
