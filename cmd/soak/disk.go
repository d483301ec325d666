package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// smallDisk is a small tmpfs holding every table and index of the product's
// schema (a tablespace), so the disk-full fault can fill it: relation
// extension then fails with "could not extend file: No space left on
// device" (SQLSTATE 53100) while the catalogs and the WAL, on the machine's
// disk, keep the server itself up. Mounting needs root and a kernel that
// lets this process mount; where it cannot, the fault is not injected and
// the report says why.
type smallDisk struct {
	mount  string
	filler string
}

// smallDiskSize is the tmpfs's size: room for a long soak's rows many
// times over.
const smallDiskSize = "256m"

// mountSmallDisk mounts the tmpfs under dir and moves the database's tables
// and indexes onto it; the error says why it could not.
func mountSmallDisk(ctx context.Context, s *system) (*smallDisk, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("mounting a tmpfs needs root")
	}
	// Its own directory, which the postgres user can reach (the run's log
	// directory may be private to the harness's user).
	mount, err := os.MkdirTemp("", "buildrisk-soak-disk-*")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(mount, 0o755); err != nil {
		_ = os.Remove(mount)
		return nil, err
	}
	d := &smallDisk{mount: mount}
	if err := syscall.Mount("tmpfs", d.mount, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size="+smallDiskSize+",mode=0755"); err != nil {
		_ = os.Remove(mount)
		return nil, fmt.Errorf("mount -t tmpfs %s: %w", d.mount, err)
	}
	space := filepath.Join(d.mount, "tablespace")
	d.filler = filepath.Join(d.mount, "filler")
	if err := os.Mkdir(space, 0o700); err != nil {
		d.unmount()
		return nil, err
	}
	if s.pg.cred != nil {
		if err := os.Chown(space, int(s.pg.cred.Uid), int(s.pg.cred.Gid)); err != nil {
			d.unmount()
			return nil, err
		}
	}
	for _, stmt := range []string{
		"CREATE TABLESPACE soak_small LOCATION '" + space + "'",
		"ALTER TABLE ALL IN TABLESPACE pg_default SET TABLESPACE soak_small",
		"ALTER INDEX ALL IN TABLESPACE pg_default SET TABLESPACE soak_small",
	} {
		if _, err := s.db.Exec(ctx, stmt); err != nil {
			d.unmount()
			return nil, fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return d, nil
}

// fill writes a file over the disk's free space until the disk is full.
func (d *smallDisk) fill() error {
	f, err := os.Create(d.filler)
	if err != nil {
		return err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			return err
		}
	}
	// Whatever a 1 MiB write could not fill, smaller ones do.
	for _, size := range []int{64 << 10, 4 << 10, 512} {
		for {
			if _, err := f.Write(chunk[:size]); err != nil {
				break
			}
		}
	}
	return nil
}

// free removes the filler.
func (d *smallDisk) free() error {
	if err := os.Remove(d.filler); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// used is how much of the disk the database holds, for the figures.
func (d *smallDisk) used() string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(d.mount, &st); err != nil {
		return "?"
	}
	used := (st.Blocks - st.Bfree) * uint64(st.Bsize)
	return strconv.FormatUint(used>>20, 10) + " MiB of " + smallDiskSize
}

// unmount detaches the tmpfs (after the server that used it has stopped)
// and removes its directory.
func (d *smallDisk) unmount() {
	_ = syscall.Unmount(d.mount, syscall.MNT_DETACH)
	_ = os.Remove(d.mount)
}
