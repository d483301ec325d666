package batch_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/radartype"
)

// partsJob is one chunk of 100 items on FanOutCommit writing its items to
// the table part_write, whose check constraint refuses item badItem: the
// part holding it fails in the server, so it does not commit.
type partsJob struct {
	badItem string
	called  []string // items whose function ran, in no particular order
	results chan []batch.ItemResult[string]
}

func (j *partsJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	return &batch.Plan{Chunks: []string{"c"}, Targets: 100}, nil
}

func (j *partsJob) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	items := make([]string, 100)
	for i := range items {
		items[i] = fmt.Sprintf("i%03d", i)
	}
	calls := make(chan string, len(items))
	results, err := batch.FanOutCommit(ctx, run, chunk, items,
		func(_ context.Context, item string) (string, error) {
			calls <- item
			return item, nil
		},
		batch.Committer[string, string]{
			Key: func(s string) string { return s },
			Queue: func(b *pgx.Batch, values []string) {
				b.Queue(`INSERT INTO part_write (item) SELECT unnest($1::text[])`, values)
			},
		})
	close(calls)
	for item := range calls {
		j.called = append(j.called, item)
	}
	j.results <- results
	if err != nil {
		return nil, err
	}
	return &batch.ChunkResult{}, nil
}

// A part that fails to commit stops the chunk: no item is handed out after
// it, the execution fails naming the commit, and exactly the items whose
// part committed are kept and reported Committed (the resume's skip list).
func TestFanOutCommit_CommitFailureStopsAndKeepsCommitted(t *testing.T) {
	t.Parallel()
	job := &partsJob{badItem: "i040", results: make(chan []batch.ItemResult[string], 1)}
	b := setup(t, map[string]batch.Job{"creditEval": job})
	_, err := b.pool.Exec(context.Background(), `CREATE TABLE part_write (item text PRIMARY KEY CHECK (item <> '`+job.badItem+`'))`)
	require.NoError(t, err)
	out, err := b.runner.Run(context.Background(), batch.RunOpts{RequestID: b.enqueue(t, "creditEval")})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionFailed, out.Status)
	require.Regexp(t, `^chunk c: commit of \d+ finished items of chunk c: .*violates check constraint`, out.Message)

	results := <-job.results
	var committed []string
	for _, r := range results {
		if r.Committed {
			require.True(t, r.Done)
			committed = append(committed, r.Value)
		}
	}
	require.NotContains(t, committed, "i040")
	require.Less(t, len(job.called), 100, "handing out stopped at the failed commit")
	exec, err := queries.New().JobExecutionGetByID(context.Background(), b.pool, out.ExecutionID)
	require.NoError(t, err)
	parts, err := queries.New().JobCheckpointPartItems(context.Background(), b.pool, exec.InstanceID)
	require.NoError(t, err)
	require.ElementsMatch(t, committed, parts, "the parts list exactly the committed items")
	rows, err := b.pool.Query(context.Background(), `SELECT item FROM part_write`)
	require.NoError(t, err)
	written, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.ElementsMatch(t, committed, written, "exactly the committed items' writes landed: the failed part rolled back whole")
	require.Equal(t, int64(len(committed)), exec.ItemsWritten)
	totals, err := queries.New().JobCheckpointTotals(context.Background(), b.pool, exec.InstanceID)
	require.NoError(t, err)
	require.Equal(t, int64(len(committed)), totals.Targets)
	require.Equal(t, int64(len(committed)), totals.Written)
	require.Zero(t, totals.Chunks)
}

// fencedPartsJob is one chunk of 100 items on FanOutCommit whose parts are
// written to a probe table; the function of item lostAt first runs lose
// (the execution is abandoned or taken over), so the part holding it, and
// every part after it, must find the execution no longer the run's.
type fencedPartsJob struct {
	lostAt string
	lose   func()
}

func (j *fencedPartsJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	return &batch.Plan{Chunks: []string{"c"}, Targets: 100}, nil
}

func (j *fencedPartsJob) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	items := make([]string, 100)
	for i := range items {
		items[i] = fmt.Sprintf("i%03d", i)
	}
	_, err := batch.FanOutCommit(ctx, run, chunk, items,
		func(_ context.Context, item string) (string, error) {
			if item == j.lostAt {
				j.lose()
			}
			return item, nil
		},
		batch.Committer[string, string]{
			Key: func(s string) string { return s },
			Queue: func(b *pgx.Batch, values []string) {
				b.Queue(`INSERT INTO part_probe (item) SELECT unnest($1::text[])`, values)
			},
		})
	if err != nil {
		return nil, err
	}
	return &batch.ChunkResult{}, nil
}

// A part commit is fenced like a chunk commit: once the execution is
// abandoned mid-chunk, the next part writes nothing (neither its items nor
// its part record nor the written count) and the run ends with ownership
// lost; what committed before stays, listed exactly by its parts.
func TestFanOutCommit_PartCommitIsFenced(t *testing.T) {
	t.Parallel()
	job := &fencedPartsJob{lostAt: "i050"}
	b := setup(t, map[string]batch.Job{"creditEval": job})
	_, err := b.pool.Exec(context.Background(), `CREATE TABLE part_probe (item text PRIMARY KEY)`)
	require.NoError(t, err)
	id := b.enqueue(t, "creditEval")
	job.lose = func() { b.abandon(t, id) }
	out, err := b.runner.Run(context.Background(), batch.RunOpts{RequestID: id})
	require.ErrorIs(t, err, batch.ErrOwnershipLost)

	var probed []string
	rows, err := b.pool.Query(context.Background(), `SELECT item FROM part_probe`)
	require.NoError(t, err)
	probed, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotContains(t, probed, "i050", "the part holding the item that saw the loss never committed")
	exec, err := queries.New().JobExecutionGetByID(context.Background(), b.pool, out.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, "ABANDONED", exec.Status)
	parts, err := queries.New().JobCheckpointPartItems(context.Background(), b.pool, exec.InstanceID)
	require.NoError(t, err)
	require.ElementsMatch(t, probed, parts, "every written item is in a part, and no part lists an unwritten one")
	require.Equal(t, int64(len(probed)), exec.ItemsWritten)
}

// compactJob is two chunks of 50 items on FanOutCommit writing to the table
// compact_write; while haltAt is set, the function of that item halts the
// chunk (the execution fails with the parts before it committed).
type compactJob struct {
	haltAt string
	// called, when set, is told of each item's call.
	called func(item string)
	// committed, when set, runs after the chunk's items are committed in
	// parts, before Process returns.
	committed func(ctx context.Context, chunk string) error
}

func (j *compactJob) Plan(context.Context, *batch.Run) (*batch.Plan, error) {
	return &batch.Plan{Chunks: []string{"a", "b"}, Targets: 100}, nil
}

func (j *compactJob) Process(ctx context.Context, run *batch.Run, chunk string) (*batch.ChunkResult, error) {
	done, err := batch.CommittedItems(ctx, run)
	if err != nil {
		return nil, err
	}
	var items []string
	for i := range 50 {
		if item := fmt.Sprintf("%s%02d", chunk, i); !done[item] {
			items = append(items, item)
		}
	}
	_, err = batch.FanOutCommit(ctx, run, chunk, items,
		func(_ context.Context, item string) (string, error) {
			if item == j.haltAt {
				return "", batch.Halt(fmt.Errorf("halted at %s", item))
			}
			if j.called != nil {
				j.called(item)
			}
			return item, nil
		},
		batch.Committer[string, string]{
			Key: func(s string) string { return s },
			Queue: func(b *pgx.Batch, values []string) {
				b.Queue(`INSERT INTO compact_write (item) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING`, values)
			},
		})
	if err != nil {
		return nil, err
	}
	if j.committed != nil {
		if err := j.committed(ctx, chunk); err != nil {
			return nil, err
		}
	}
	return &batch.ChunkResult{}, nil
}

// A chunk's commit folds its checkpoint parts into its checkpoint, also the
// parts an earlier execution of the instance committed before it failed:
// job_checkpoint_part does not grow run over run, and the instance's totals
// and the executions' written counts still account for every item once.
func TestFanOutCommit_ChunkCommitFoldsParts(t *testing.T) {
	t.Parallel()
	job := &compactJob{haltAt: "b20"}
	b := setup(t, map[string]batch.Job{"creditEval": job})
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `CREATE TABLE compact_write (item text PRIMARY KEY)`)
	require.NoError(t, err)
	partRows := func() int64 {
		var n int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM job_checkpoint_part`).Scan(&n))
		return n
	}

	failed, err := b.runner.Run(ctx, batch.RunOpts{RequestID: b.enqueue(t, "creditEval")})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionFailed, failed.Status, failed.Message)
	require.Positive(t, partRows(), "the failed chunk's finished items are kept in parts")

	job.haltAt = ""
	first, err := b.runner.Run(ctx, batch.RunOpts{RequestID: b.enqueue(t, "creditEval")})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionCompleted, first.Status, first.Message)
	afterFirst := partRows()
	require.Zero(t, afterFirst, "every committed chunk's parts folded into its checkpoint")

	q := queries.New()
	failedExec, err := q.JobExecutionGetByID(ctx, b.pool, failed.ExecutionID)
	require.NoError(t, err)
	firstExec, err := q.JobExecutionGetByID(ctx, b.pool, first.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, failedExec.InstanceID, firstExec.InstanceID, "the second run resumed the failed one")
	require.Equal(t, int64(100), failedExec.ItemsWritten+firstExec.ItemsWritten, "each item written once, by one of them")
	totals, err := q.JobCheckpointTotals(ctx, b.pool, firstExec.InstanceID)
	require.NoError(t, err)
	require.Equal(t, int64(2), totals.Chunks)
	require.Equal(t, int64(100), totals.Targets)
	require.Equal(t, int64(100), totals.Written)
	var targetsB, writtenB int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT targets, written FROM job_checkpoint WHERE instance_id = $1 AND chunk = 'b'`,
		firstExec.InstanceID).Scan(&targetsB, &writtenB))
	require.Equal(t, int64(50), targetsB, "chunk b's checkpoint holds both executions' parts")
	require.Equal(t, int64(50), writtenB)

	second, err := b.runner.Run(ctx, batch.RunOpts{RequestID: b.enqueue(t, "creditEval")})
	require.NoError(t, err)
	require.Equal(t, radartype.ExecutionCompleted, second.Status, second.Message)
	require.LessOrEqual(t, partRows(), afterFirst, "an identical run leaves no more parts than the first")
	secondExec, err := q.JobExecutionGetByID(ctx, b.pool, second.ExecutionID)
	require.NoError(t, err)
	require.NotEqual(t, firstExec.InstanceID, secondExec.InstanceID)
	require.Equal(t, int64(100), secondExec.ItemsWritten)
}
