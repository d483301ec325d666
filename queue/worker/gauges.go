package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/upstream"
)

// Gauges records the cluster-wide gauges the alerts read: live workers,
// the oldest queued request per job, and each provider's daily cap and
// calls remaining. Every worker records them on its heartbeat; the alert
// rules aggregate with max().
type Gauges struct {
	Pool        *pgxpool.Pool
	Jobs        []string
	Upstream    *upstream.Client
	StaleAfter  time.Duration
	Instruments *observability.Instruments
}

// Record reads and sets every gauge once.
func (g *Gauges) Record(ctx context.Context) error {
	q := queries.New()
	alive, err := q.WorkerCountAlive(ctx, g.Pool, g.StaleAfter.Seconds())
	if err != nil {
		return fmt.Errorf("error counting live workers: %w", err)
	}
	g.Instruments.WorkersAliveSet(ctx, alive)

	oldest, err := q.JobRequestOldestQueuedByJob(ctx, g.Pool)
	if err != nil {
		return fmt.Errorf("error reading queue age: %w", err)
	}
	age := map[string]float64{}
	for _, row := range oldest {
		age[row.Job] = row.OldestAgeSeconds // the database's clock, not this process's
	}
	for _, job := range g.Jobs {
		g.Instruments.QueueOldestAgeSet(ctx, job, age[job])
	}

	if g.Upstream != nil {
		for _, p := range upstream.Providers {
			remaining, err := g.Upstream.Remaining(ctx, p)
			if err != nil {
				return err
			}
			g.Instruments.ProviderDailyCapSet(ctx, string(p), int64(g.Upstream.DailyCap(p)))
			g.Instruments.ProviderCallsRemainingSet(ctx, string(p), int64(remaining))
		}
	}
	return nil
}
