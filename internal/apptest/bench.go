package apptest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/buildrisk/radar/queue/batch"
)

// NoopJob is one empty chunk: what the service adds around River is all
// that is measured.
type NoopJob struct{}

func (NoopJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	return &batch.Plan{Chunks: []string{"only"}, Targets: batch.TargetsUnknown}, nil
}

func (NoopJob) Process(context.Context, *batch.Run, string) (*batch.ChunkResult, error) {
	return &batch.ChunkResult{Targets: 1, Written: 1}, nil
}

type RawNoopArgs struct {
	Lane int `json:"lane"`
}

func (RawNoopArgs) Kind() string { return "bench_noop" }

// Completions routes River's completed events to whoever waits on a job id.
type Completions struct {
	mu      sync.Mutex
	waiters map[int64]chan struct{}
	done    map[int64]bool
}

func NewCompletions(events <-chan *river.Event) *Completions {
	c := &Completions{waiters: map[int64]chan struct{}{}, done: map[int64]bool{}}
	go func() {
		for e := range events {
			c.mu.Lock()
			if ch, ok := c.waiters[e.Job.ID]; ok {
				close(ch)
				delete(c.waiters, e.Job.ID)
			}
			c.done[e.Job.ID] = true // a later wait for the same job returns at once
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *Completions) Wait(id int64) {
	c.mu.Lock()
	if c.done[id] {
		c.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	c.waiters[id] = ch
	c.mu.Unlock()
	<-ch
}

// Lanes runs `lanes` goroutines each doing perLane sequential round trips.
func Lanes(b *testing.B, count, perLane int, roundTrip func(lane int)) time.Duration {
	b.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	for lane := range count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perLane {
				roundTrip(lane)
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}
