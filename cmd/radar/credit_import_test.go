package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/sql/pgtest"
)

type importResult struct {
	code           int
	stdout, stderr string
}

func runImportFile(t *testing.T, pool *pgxpool.Pool, content string) (importResult, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "exposure.csv")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	var stdout, stderr bytes.Buffer
	code := importExposure(context.Background(), pool, path, &stdout, &stderr)
	return importResult{code, stdout.String(), stderr.String()}, path
}

func ledger(t *testing.T, pool *pgxpool.Pool) map[string]int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT corp_code, outstanding_krw FROM exposure`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var code string
		var amount int64
		require.NoError(t, rows.Scan(&code, &amount))
		out[code] = amount
	}
	require.NoError(t, rows.Err())
	return out
}

// `radar import exposure`: each bad line is reported with its line number,
// the good lines are loaded, the exit code says which happened, and a
// failed load writes nothing at all.
func TestImportExposure(t *testing.T) {
	t.Parallel()

	t.Run("BadLinesReportedGoodOnesLoaded", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t)
		content := "\ufeffcorp_code, Outstanding_KRW\r\n" + // 1: header, BOM and CRLF as a spreadsheet writes them
			"00126380,1500000000\r\n" + // 2
			"\r\n" + // 3: blank, ignored
			"1263800,5\r\n" + // 4: 7 digits
			"0012638A,5\r\n" + // 5: not digits
			"00164779,-5\r\n" + // 6: negative
			"00164779,1.5\r\n" + // 7: not an integer
			"00164779,1,2\r\n" + // 8: 3 fields
			"\"00164779\",\"0\"\r\n" + // 9: quoted, good (repaid)
			"00126380,7\r\n" + // 10: repeats line 2
			"00401731,99999999999999999999\r\n" + // 11: out of range
			"00401731,\"unterminated\r\n" + // 12: malformed CSV
			"00401731,42\n" // 13
		res, path := runImportFile(t, pool, content)
		require.Equal(t, exitFailed, res.code, "some lines bad: exit 1\n%s", res.stderr)
		for _, want := range []string{
			path + `:4: corp_code "1263800" is not an 8-digit DART corp code`,
			path + `:5: corp_code "0012638A" is not an 8-digit DART corp code`,
			path + `:6: outstanding_krw "-5" is not an integer >= 0`,
			path + `:7: outstanding_krw "1.5" is not an integer >= 0`,
			path + `:8: 3 fields, want 2`,
			path + `:10: corp_code 00126380 is already on line 2`,
			path + `:11: outstanding_krw "99999999999999999999" is out of range`,
			path + `:12: malformed CSV`,
		} {
			require.Contains(t, res.stderr, want)
		}
		require.Equal(t, 8, strings.Count(res.stderr, "\n"), res.stderr)
		require.Contains(t, res.stdout, "loaded 3 companies")
		require.Contains(t, res.stdout, "8 bad lines skipped")
		require.Equal(t, map[string]int64{"00126380": 1_500_000_000, "00164779": 0, "00401731": 42}, ledger(t, pool))

		// All good: exit 0, and a company listed again takes the new amount.
		res, _ = runImportFile(t, pool, "corp_code,outstanding_krw\n00126380,7\n00900001,3\n")
		require.Equal(t, exitOK, res.code, res.stderr)
		require.Empty(t, res.stderr)
		require.Equal(t, "exposure: loaded 2 companies from "+strings.TrimSpace(res.stdout[strings.Index(res.stdout, "from ")+5:])+"\n", res.stdout)
		require.Equal(t, map[string]int64{"00126380": 7, "00164779": 0, "00401731": 42, "00900001": 3}, ledger(t, pool))
	})

	t.Run("UsageAndUnreadable", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t)
		for name, content := range map[string]string{
			"WrongHeader":   "corp,amount\n00126380,5\n",
			"MissingHeader": "00126380,5\n",
			"Empty":         "",
		} {
			res, _ := runImportFile(t, pool, content)
			require.Equal(t, exitUsage, res.code, name)
			require.Contains(t, res.stderr, "header", name)
		}
		var stdout, stderr bytes.Buffer
		require.Equal(t, exitUsage, importExposure(context.Background(), pool, filepath.Join(t.TempDir(), "nope.csv"), &stdout, &stderr))
		require.Contains(t, stderr.String(), "cannot read")
		require.Equal(t, exitUsage, runImport(context.Background(), nil, &stdout, &stderr))
		require.Equal(t, exitUsage, runImport(context.Background(), []string{"ledger", "x.csv"}, &stdout, &stderr))
		require.Empty(t, ledger(t, pool), "nothing written")

		res, _ := runImportFile(t, pool, "corp_code,outstanding_krw\n")
		require.Equal(t, exitOK, res.code, "a header alone is an empty ledger")
		require.Contains(t, res.stdout, "loaded 0 companies")
	})

	t.Run("NothingHalfWritten", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t)
		// The database refuses the last line (a trigger stands in for any
		// failure during the load): none of the good lines may stay.
		_, err := pool.Exec(context.Background(), `
			CREATE FUNCTION refuse_99999999() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF NEW.corp_code = '99999999' THEN RAISE EXCEPTION 'refused by the test'; END IF;
				RETURN NEW;
			END $$;
			CREATE TRIGGER refuse BEFORE INSERT ON exposure FOR EACH ROW EXECUTE FUNCTION refuse_99999999();`)
		require.NoError(t, err)
		res, _ := runImportFile(t, pool, "corp_code,outstanding_krw\n00126380,5\n00164779,6\n99999999,7\n")
		require.Equal(t, exitFailed, res.code)
		require.Contains(t, res.stderr, "nothing was loaded")
		require.Empty(t, ledger(t, pool))
	})
}
