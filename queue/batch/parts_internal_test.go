package batch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/observability/observabilitytest"
	"github.com/buildrisk/radar/sql/pgtest"
)

// A part waits for minPart values before it commits, and the values that
// arrive while it commits go together in the next part; a part that has
// fewer commits once its oldest value has waited maxWait or the group
// closes, and every value learns its own part's result.
func TestGroupCommit_PartsWaitForCompany(t *testing.T) {
	type part struct {
		keys    []string
		release chan error
	}
	entered := make(chan part)
	newGroup := func(minPart int, maxWait time.Duration) *groupCommit[string] {
		return newGroupCommit(minPart, maxWait, func(keys []string, _ []string) error {
			p := part{keys: keys, release: make(chan error)}
			entered <- p
			return <-p.release
		})
	}
	add := func(g *groupCommit[string], key string) <-chan error {
		result := make(chan error, 1)
		g.add(key, key, func(err error) { result <- err })
		return result
	}
	next := func(what string) part {
		t.Helper()
		select {
		case p := <-entered:
			return p
		case <-time.After(10 * time.Second):
			t.Fatalf("no part began to commit: %s", what)
			return part{}
		}
	}

	t.Run("MinPart", func(t *testing.T) {
		g := newGroup(3, time.Hour)
		queued := make(chan struct{}, 8)
		g.queued = func() { queued <- struct{}{} }
		resultA, resultB, resultC := add(g, "a"), add(g, "b"), add(g, "c")
		partABC := next("a, b and c")
		// Had a part begun before the third value, it would hold fewer.
		require.Equal(t, []string{"a", "b", "c"}, partABC.keys, "the part waited for three values")
		resultD, resultE := add(g, "d"), add(g, "e")
		for range 5 {
			<-queued
		}
		partABC.release <- nil
		resultF := add(g, "f")
		partDEF := next("d, e and f, once a's part committed")
		require.Equal(t, []string{"d", "e", "f"}, partDEF.keys)
		partDEF.release <- errors.New("disk full")
		resultG := add(g, "g")
		closed := make(chan struct{})
		go func() { g.close(); close(closed) }()
		partG := next("g, alone, once the group closes")
		require.Equal(t, []string{"g"}, partG.keys)
		partG.release <- nil
		<-closed
		for _, r := range []<-chan error{resultA, resultB, resultC, resultG} {
			require.NoError(t, <-r)
		}
		for _, r := range []<-chan error{resultD, resultE, resultF} {
			require.EqualError(t, <-r, "disk full")
		}
	})

	t.Run("MaxWait", func(t *testing.T) {
		g := newGroup(100, time.Millisecond)
		result := add(g, "x")
		p := next("x, alone, once it has waited maxWait")
		require.Equal(t, []string{"x"}, p.keys)
		p.release <- nil
		require.NoError(t, <-result)
		g.close()
	})
}

// A slot is free for its next call while its item's part commits, but the
// items paid for and not yet committed never exceed paidWindow: with every
// part commit held, exactly paidWindow(size) calls start, then the producer
// waits; once the commits go through, every item is called once and
// committed.
func TestFanOutCommit_PaidWindowBoundsUncommittedItems(t *testing.T) {
	t.Parallel()
	const size, items = 3, 20
	providers, _ := observabilitytest.NewProviders()
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	pool := pgtest.NewPool(t)
	_, err = pool.Exec(t.Context(), `CREATE TABLE window_write (item text PRIMARY KEY)`)
	require.NoError(t, err)
	run := &Run{DB: NewReader(pool), Job: "creditEval", FanOut: size, Instruments: instruments, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}

	holdCommits := make(chan struct{})
	full := make(chan struct{}, items)
	calls := make(chan string, items)
	keys := make([]string, items)
	for i := range keys {
		keys[i] = fmt.Sprintf("i%02d", i)
	}
	done := make(chan []ItemResult[string], 1)
	go func() {
		results, err := fanOutCommit(context.Background(), run, "c", keys,
			func(_ context.Context, item string) (string, error) {
				calls <- item
				return item, nil
			},
			Committer[string, string]{
				Key: func(s string) string { return s },
				Queue: func(b *pgx.Batch, values []string) {
					<-holdCommits // the part commit is held until the test lets it go
					b.Queue(`INSERT INTO window_write (item) SELECT unnest($1::text[])`, values)
				},
			},
			func() { full <- struct{}{} })
		require.NoError(t, err)
		done <- results
	}()

	select {
	case <-full:
	case <-time.After(10 * time.Second):
		t.Fatalf("the producer never waited for a commit (%d items called)", len(calls))
	}
	// The producer waits for a token now, so the items handed over so far
	// are all there will be until a commit goes through.
	for n := range paidWindow(size) {
		select {
		case <-calls:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d items called while the commits are held; the window is %d", n, paidWindow(size))
		}
	}
	require.Zero(t, len(calls), "calls made while every commit is held: the window, no more")
	require.Greater(t, paidWindow(size), size, "finished items do not hold their slots")
	close(holdCommits)

	var results []ItemResult[string]
	select {
	case results = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the chunk never ended")
	}
	require.Equal(t, items-paidWindow(size), len(calls), "every item called once")
	for _, r := range results {
		require.True(t, r.Done && r.Committed, "%+v", r)
	}
	var written int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM window_write`).Scan(&written))
	require.Equal(t, items, written)
}
