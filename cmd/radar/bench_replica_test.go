package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/radartype"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// replicaFanOut is the FANOUT of the replica group's fan-out row.
const replicaFanOut = 16

// replicaSample is what one topology measured, a value per repetition:
// the fan-out run's calls per second and the back-to-back pickup's p99.
type replicaSample struct{ callsPerSec, pickupP99 []float64 }

// benchReplica: what the database's topology costs. The fan-out row
// (creditEval at FANOUT 16 against 20 ms calls) and the back-to-back
// pickup row (created → claimed p99, a request every 20 ms) on one
// PostgreSQL, then on a primary with an asynchronous standby and with a
// synchronous one (synchronous_standby_names: a commit waits for the
// standby's flush), each through a multi-host DATABASE_URL as deployed;
// the standbys' figures beside the single node's, in one run.
func benchReplica(t *testing.T, scale benchScale) []*benchRow {
	single := measureTopology(t, scale, "")
	_, asyncURL := apptest.ReplicatedCluster(t, false)
	async := measureTopology(t, scale, asyncURL)
	_, syncURL := apptest.ReplicatedCluster(t, true)
	sync := measureTopology(t, scale, syncURL)

	fanOut := func(name string, target string, with replicaSample) *benchRow {
		row := &benchRow{name: fmt.Sprintf("replica: creditEval %d targets, %s calls, FANOUT %d, %s", scale.creditN, scale.latency, replicaFanOut, name),
			unit: "calls/s", refName: "one PostgreSQL", target: target}
		for i := range with.callsPerSec {
			row.add(with.callsPerSec[i], single.callsPerSec[i])
		}
		return row
	}
	pickup := func(name string, target string, with replicaSample) *benchRow {
		row := &benchRow{name: "replica: pickup created → claimed p99, back to back (20 ms apart), " + name, unit: "ms", refName: "one PostgreSQL", target: target}
		for i := range with.pickupP99 {
			row.add(with.pickupP99[i], single.pickupP99[i])
		}
		return row
	}
	return []*benchRow{
		fanOut("asynchronous standby", "", async),
		fanOut("synchronous standby", "≥ 0.85", sync),
		pickup("asynchronous standby", "", async),
		pickup("synchronous standby", "≤ 2", sync),
	}
}

// measureTopology runs the replica group's two rows scale.reps times on a
// system of its own whose database is url ("": the harness's one
// PostgreSQL).
func measureTopology(t *testing.T, scale benchScale, url string) replicaSample {
	t.Helper()
	s := apptest.New(t, &apptest.Opts{
		DBURL: url,
		Env: map[string]string{
			"BUILDRISK_FANOUT":             fmt.Sprint(replicaFanOut),
			"BUILDRISK_HEARTBEAT_INTERVAL": worker.HeartbeatIntervalDefault.String(),
			"BUILDRISK_STALE_AFTER":        worker.StaleAfterDefault.String(),
			"BUILDRISK_REAP_INTERVAL":      worker.ReapIntervalDefault.String(),
		},
		Fake: fakeupstream.Config{Latency: scale.latency, Companies: max(scale.creditN+1, fakeupstream.CompaniesDefault)},
	})
	productionTelemetry(t, s)
	seedTargets(t, s, scale.creditN)
	runner, owner := benchRunner(t, s, nil)
	pickups := newPickupBench(t, s)
	var out replicaSample
	for range scale.reps {
		before := s.Fake.Stats().Total
		_, took := benchRun(t, runner, owner, credit.Name, `{}`)
		out.callsPerSec = append(out.callsPerSec, float64(s.Fake.Stats().Total-before)/took.Seconds())
		out.pickupP99 = append(out.pickupP99, pickups.backToBackP99(t, scale.pickups))
	}
	return out
}

// pickupBench enqueues no-op requests through the production path (the
// request owner on the api's pool and an insert-only River client) for a
// worker of no-op jobs, and reads each one's created → claimed.
type pickupBench struct {
	s     *apptest.System
	owner *request.Owner
	done  *apptest.Completions
	lanes []string
}

func newPickupBench(t *testing.T, s *apptest.System) *pickupBench {
	t.Helper()
	const lanes = 20
	b := &pickupBench{s: s}
	registry := map[string]batch.Job{}
	var defs []catalog.Definition
	for i := range lanes {
		name := fmt.Sprintf("pickup%d", i)
		b.lanes = append(b.lanes, name)
		registry[name] = apptest.NoopJob{}
		defs = append(defs, &catalog.Spec[struct{}]{JobName: name, Desc: "benchmark no-op"})
	}
	w, _ := s.StartWorkerWith(s.Pool, func(_ *worker.Config, rc *batch.Config) { rc.Jobs = registry })
	insertOnly, err := river.NewClient(riverpgxv5.New(s.APIPool), &river.Config{FetchCooldown: river.FetchCooldownMin})
	require.NoError(t, err)
	b.owner, err = request.NewOwner(s.APIPool, insertOnly, request.Config{
		Catalog: catalog.NewCatalog(defs...), Instruments: s.Tel.Instruments, StaleAfter: s.Env.StaleAfter,
	})
	require.NoError(t, err)
	events, cancel := w.River().Subscribe(river.EventKindJobCompleted)
	t.Cleanup(cancel)
	b.done = apptest.NewCompletions(events)
	return b
}

// backToBackP99 enqueues n requests 20 ms apart over the lanes (a lane's
// next request once its previous one has ended) and returns the p99 of
// their created → claimed in milliseconds, by the database's clock.
func (b *pickupBench) backToBackP99(t *testing.T, n int) float64 {
	t.Helper()
	ctx := context.Background()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var ids, riverIDs []int64
	last := map[int]int64{}
	for i := range n {
		lane := i % len(b.lanes)
		if prev, ok := last[lane]; ok {
			b.done.Wait(prev)
		}
		res, err := b.owner.Enqueue(ctx, &request.EnqueueParams{Job: b.lanes[lane], Source: radartype.SourceAPI})
		require.NoError(t, err)
		ids = append(ids, res.Request.ID)
		riverIDs = append(riverIDs, *res.Request.RiverJobID)
		last[lane] = *res.Request.RiverJobID
		<-tick.C
	}
	for _, id := range riverIDs {
		b.done.Wait(id)
	}
	var ms []float64
	for _, id := range ids {
		var created, claimed time.Time
		require.NoError(t, b.s.Pool.QueryRow(ctx, `SELECT created_at, claimed_at FROM job_request WHERE id = $1`, id).Scan(&created, &claimed))
		ms = append(ms, float64(claimed.Sub(created).Microseconds())/1000)
	}
	slices.Sort(ms)
	return ms[int(float64(len(ms)-1)*0.99)]
}
