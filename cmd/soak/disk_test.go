package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// fill leaves a small tmpfs with no byte free and free gives the room back;
// where this machine cannot mount a tmpfs, the soak does not inject
// disk-full either, and the test says so.
func TestSmallDisk_FillAndFree(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("no tmpfs can be mounted here: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	d := &smallDisk{mount: dir, filler: filepath.Join(dir, "filler")}

	require.NoError(t, d.fill())
	err := os.WriteFile(filepath.Join(dir, "more"), make([]byte, 4096), 0o644)
	require.ErrorIs(t, err, syscall.ENOSPC, "full to the last block")

	require.NoError(t, d.free())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "more"), make([]byte, 4096), 0o644))
	require.NoError(t, d.free(), "freeing twice is no error")
}
