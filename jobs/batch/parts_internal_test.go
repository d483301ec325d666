package batch

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An item that finishes while a part commits starts a part of its own at
// once instead of waiting for that one, up to partCommitsAtOnce parts; the
// items that finish while both commit go together in the next part, and
// every item learns its own part's result.
func TestGroupCommit_PartsCommitSideBySide(t *testing.T) {
	type part struct {
		keys    []string
		release chan error
	}
	entered := make(chan part)
	g := &groupCommit[string]{turn: make(chan struct{}, partCommitsAtOnce), commit: func(keys []string, _ []string) error {
		p := part{keys: keys, release: make(chan error)}
		entered <- p
		return <-p.release
	}}
	queued := make(chan struct{}, 4)
	g.queued = func() { queued <- struct{}{} }
	add := func(key string) <-chan error {
		result := make(chan error, 1)
		go func() { result <- g.add(key, key) }()
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
		waitQueued(what) // c and d are pending while both parts hold the turns
	}
	partA.release <- nil
	partCD := next("c and d, once a's part committed")
	require.ElementsMatch(t, []string{"c", "d"}, partCD.keys, "c and d, finished while both parts committed, go together")
	partB.release <- errors.New("disk full")
	partCD.release <- nil

	require.NoError(t, <-resultA)
	require.EqualError(t, <-resultB, "disk full")
	require.NoError(t, <-resultC)
	require.NoError(t, <-resultD)
}
