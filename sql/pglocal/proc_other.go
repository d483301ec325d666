//go:build unix && !linux

package pglocal

import (
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr returns the process attributes of initdb and postgres: run as
// cred (when not nil). Without a parent-death signal on this platform, a
// server orphaned by a crash keeps running until the next Start sweeps it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}

// processAlive reports whether pid names a running process.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// processStartTime returns the start time of pid as ps(1) reports it, or ""
// when unknown. With the pid, it identifies a process across pid reuse.
func processStartTime(pid int) string {
	out, err := exec.Command("ps", "-o", "lstart=", "-p", strconv.Itoa(pid)).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// isPostmasterOf reports whether pid runs with dataDir as its data directory,
// so that a stale postmaster.pid never gets an unrelated process killed.
func isPostmasterOf(pid int, dataDir string) bool {
	out, err := exec.Command("ps", "-o", "command=", "-p", strconv.Itoa(pid)).Output()
	if err != nil {
		return false
	}
	return strings.Contains(string(out), " "+dataDir+" ")
}
