package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/queries/testfactory"
)

// Any exposure ledger file: no panic, a usage error loads nothing, and
// every row loaded is a well-formed line of the file.
func FuzzImportExposure(f *testing.F) {
	s := apptest.New(f, nil)
	dir := f.TempDir()
	f.Add([]byte("corp_code,outstanding_krw\n00126380,1000\n00164779,0\n"))
	f.Add([]byte("corp_code,outstanding_krw\n00126380,-1\n1234567,5\n00126380,7\n\"00164779\",\"12\"\n"))
	f.Add([]byte("corp_code,outstanding_krw\r\n00126380,99999999999999999999\r\n"))
	f.Add([]byte("wrong,header\n00126380,1\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		testfactory.ClearExposure(context.Background(), t, s.Pool)
		path := filepath.Join(dir, "ledger.csv")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		code := importExposure(context.Background(), s.Pool, path, io.Discard, io.Discard)
		rows, err := s.Pool.Query(context.Background(), "SELECT corp_code, outstanding_krw FROM exposure")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var corp string
			var amount int64
			if err := rows.Scan(&corp, &amount); err != nil {
				t.Fatal(err)
			}
			n++
			if len(corp) != 8 || amount < 0 || !strings.Contains(string(data), corp) {
				t.Fatalf("row %s %d loaded from %q", corp, amount, data)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		switch {
		case code == exitUsage && n > 0:
			t.Fatalf("exit %d (usage) but %d rows loaded from %q", code, n, data)
		case code != exitOK && code != exitFailed && code != exitUsage:
			t.Fatalf("exit %d for %q", code, data)
		}
	})
}
