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

// A value that arrives while a part commits starts a part of its own at
// once instead of waiting for that one, up to partCommitsAtOnce parts; the
// values that arrive while both commit go together in the next part, and
// every value learns its own part's result.
func TestGroupCommit_PartsCommitSideBySide(t *testing.T) {
	type part struct {
		keys    []string
		release chan error
	}
	entered := make(chan part)
	g := newGroupCommit(func(keys []string, _ []string) error {
		p := part{keys: keys, release: make(chan error)}
		entered <- p
		return <-p.release
	})
	queued := make(chan struct{}, 4)
	g.queued = func() { queued <- struct{}{} }
	add := func(key string) <-chan error {
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
	waitQueued := func(what string) {
		t.Helper()
		select {
		case <-queued:
		case <-time.After(10 * time.Second):
			t.Fatalf("never pending: %s", what)
		}
	}

	resultA := add("a")
	partA := next("a")
	require.Equal(t, []string{"a"}, partA.keys)
	resultB := add("b")
	partB := next("b, while a's part commits")
	require.Equal(t, []string{"b"}, partB.keys, "b's part commits while a's is in flight")
	resultC, resultD := add("c"), add("d")
	for _, what := range []string{"a", "b", "c", "d"} {
		waitQueued(what) // c and d are pending while both parts commit
	}
	partA.release <- nil
	partCD := next("c and d, once a's part committed")
	require.ElementsMatch(t, []string{"c", "d"}, partCD.keys, "c and d, added while both parts committed, go together")
	partB.release <- errors.New("disk full")
	partCD.release <- nil

	require.NoError(t, <-resultA)
	require.EqualError(t, <-resultB, "disk full")
	require.NoError(t, <-resultC)
	require.NoError(t, <-resultD)
	g.close()
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
