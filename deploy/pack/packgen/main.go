// Command packgen writes the observability pack's generated files (see
// package pack) under a deploy directory, or with -check only reports the
// ones whose committed copy differs from what the pack renders and exits 1.
//
//	go run ./deploy/pack/packgen -dir deploy          # make generate
//	go run ./deploy/pack/packgen -dir deploy -check   # make check-generated
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/buildrisk/radar/deploy/pack"
)

func main() {
	dir := flag.String("dir", "deploy", "the deploy directory the paths are relative to")
	check := flag.Bool("check", false, "write nothing; exit 1 when a file is not current")
	flag.Parse()
	if err := run(*dir, *check, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "packgen:", err)
		os.Exit(1)
	}
}

// run renders the pack and writes each file under dir, or, with check,
// returns an error naming the files that differ.
func run(dir string, check bool, stdout io.Writer) error {
	files, err := pack.Files()
	if err != nil {
		return err
	}
	var stale []string
	for _, path := range slices.Sorted(maps.Keys(files)) {
		full := filepath.Join(dir, filepath.FromSlash(path))
		if check {
			current, err := os.ReadFile(full)
			if err != nil || !bytes.Equal(current, files[path]) {
				stale = append(stale, full)
			}
			continue
		}
		if err := os.WriteFile(full, files[path], 0o644); err != nil {
			return fmt.Errorf("error writing %s: %w", full, err)
		}
		fmt.Fprintln(stdout, "wrote", full)
	}
	if len(stale) > 0 {
		return fmt.Errorf("not current (run make generate): %v", stale)
	}
	return nil
}
