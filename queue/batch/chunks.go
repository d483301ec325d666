package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
)

// execute runs the chunks and decides the execution's final status. It
// returns an error wrapping ErrOwnershipLost, and no status, when the run
// lost its execution.
//
// When that happens mid-chunk (the lease check or the fence cancels the
// chunk's context), the calls still in flight are the chunk's own: at most
// the fan-out's size, or one for a job that calls one at a time. Process
// returns only after they have ended (the fan-out waits for its items), and
// what they returned is never written: every write of the run is fenced in
// SQL on the execution's worker and lease epoch, so the chunk's commit, the
// call counts and the outcome all find no row and roll back. When a fenced
// commit is what finds the loss, Process has already returned, and no call
// of the run is in flight.
func (r *Runner) execute(parent context.Context, rs *runState, opts RunOpts) (status radartype.ExecutionStatus, message string, domainRows *int64, err error) {
	st := rs.started
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	stopWatch := r.watch(ctx, cancel, rs)
	defer stopWatch()

	job := r.cfg.Jobs[st.request.Job]
	run := r.newRun(rs)
	// The run's unspent leases of the daily caps go back to the budget when
	// it ends, whatever the outcome.
	defer func() { _ = run.Calls.Release(context.WithoutCancel(ctx)) }()
	if ender, ok := job.(RunEnder); ok {
		defer ender.EndRun(run)
	}
	e := &execution{r: r, ctx: ctx, rs: rs, run: run, job: job}
	defer func() {
		if err == nil && status != "" {
			domainRows = r.countDomainRows(ctx, rs, job)
		}
	}()

	plan, pending, execStatus, end := e.start()
	if end != nil {
		return end.values()
	}
	chunksDone := len(plan.Chunks) - len(pending)
	forecaster := r.newForecaster(rs, run, plan, len(pending), r.itemsCommitted(ctx, rs, plan))
	stopForecast := forecaster.start(ctx)
	defer stopForecast()
	// ran holds the figures this run committed, by chunk (not the results,
	// which may hold the chunk's rows): what it takes out of its tally when
	// a commit turns out lost.
	ran := make(map[string]chunkFigures, len(pending))
	lostChunks := 0
	// redo takes lost chunks back: counted, out of the tally, to do again.
	redo := func(lost []string) {
		lostChunks += len(lost)
		chunksDone -= len(lost)
		r.noteLostCommits(ctx, rs, lost, ran)
	}
	drained := r.drained()
	seenMoved := r.moved.Load()
	for {
		for i := 0; i < len(pending); i++ {
			chunk := pending[i]
			if moved := r.moved.Load(); moved != seenMoved {
				seenMoved = moved
				lost, err := r.uncommittedChunks(ctx, rs, plan, pending[i:])
				if err != nil {
					return e.fail(err, "verification after a database failover").values()
				}
				if len(lost) > 0 {
					redo(lost)
					pending = slices.Insert(pending, i, lost...)
					chunk = pending[i]
				}
			}
			if execStatus == radartype.ExecutionStopping {
				rs.cause = radartype.CauseOperator
				return radartype.ExecutionStopped, MessageStopRequested, nil, nil
			}
			select {
			case <-drained:
				rs.cause = radartype.CauseDrain
				return radartype.ExecutionStopped, MessageDrained, nil, nil
			default:
			}

			began := time.Now()
			res, status, end := e.doChunk(chunk)
			if end != nil {
				return end.values()
			}
			execStatus = status
			chunksDone++
			forecaster.chunkCommitted()
			r.cfg.Instruments.ChunkDuration(ctx, run.Job, time.Since(began))
			st.items.count(ctx, observability.OutcomeWritten, res.Written)
			st.items.count(ctx, observability.OutcomeSkipped, res.Skipped)
			st.items.count(ctx, observability.OutcomeFailed, res.Failed)
			ran[chunk] = chunkFigures{written: res.Written, skipped: res.Skipped, failed: res.Failed}
			if opts.OnChunk != nil {
				opts.OnChunk(chunksDone, len(plan.Chunks))
			}
		}
		if execStatus == radartype.ExecutionStopping && chunksDone < len(plan.Chunks) {
			rs.cause = radartype.CauseOperator
			return radartype.ExecutionStopped, MessageStopRequested, nil, nil
		}
		// The end checks the plan against the database, not against the run's
		// memory: a commit acknowledged and then lost (a failover to an
		// asynchronous replica) leaves a planned chunk with no checkpoint, and
		// such a chunk is done again before the run may complete.
		lost, err := r.uncommittedChunks(ctx, rs, plan, nil)
		if err != nil {
			return e.fail(err, "verification").values()
		}
		if len(lost) == 0 {
			break
		}
		redo(lost)
		if lostChunks > len(plan.Chunks) {
			// Commits keep vanishing: the database is not keeping what it
			// acknowledges. Stop; the resume policy resumes the run.
			rs.cause = radartype.CauseDatabase
			return radartype.ExecutionStopped, fmt.Sprintf(
				"%d commits acknowledged by the database were lost (%s); stopped, resumes from the last commit",
				lostChunks, strings.Join(lost, ", ")), nil, nil
		}
		pending = lost
	}
	status, message, err = r.account(ctx, rs, plan, run.Job)
	if err != nil {
		return e.fail(err, "accounting").values()
	}
	if lostChunks > 0 && status == radartype.ExecutionCompleted {
		message += fmt.Sprintf("; %d lost commit(s) done again: the database lost them after acknowledging them", lostChunks)
	}
	return status, message, nil, nil
}

// doChunk processes chunk and commits it, with the calls it made. It
// returns the chunk's result and the execution's status after the commit,
// or the run's ending when the chunk ends the run.
func (e *execution) doChunk(chunk string) (*ChunkResult, radartype.ExecutionStatus, *ending) {
	r, ctx, rs, st, run, job := e.r, e.ctx, e.rs, e.rs.started, e.run, e.job
	callsBefore := run.Calls.Calls()
	chunkCtx, chunkSpan := r.cfg.Tracer.Start(ctx, "buildrisk.chunk", trace.WithAttributes(attribute.String("buildrisk.chunk", chunk)))
	var res *ChunkResult
	// A transient database error inside Process (the call budget, a
	// read) is retried like the commit: the chunk is done again. And
	// before the chunk commits, the items it committed in parts must
	// still be there: a part the database lost after acknowledging
	// it is done again (Process calls only the items no part lists),
	// never folded short into the checkpoint.
	err := r.retryTransient(chunkCtx, rs.fenced, rs, func(context.Context) error {
		for round := 1; ; round++ {
			var err error
			if res, err = job.Process(chunkCtx, run, chunk); err != nil {
				return err
			}
			lost, err := r.checkParts(chunkCtx, rs, run.parts, chunk)
			if err != nil || lost == 0 {
				return err
			}
			if round > maxLostRounds {
				return fmt.Errorf("%w: %d items of chunk %s committed in parts vanished again", ErrCommitsLost, lost, chunk)
			}
		}
	})
	if err != nil {
		err = r.cfg.Upstream.RedactError(err)
		chunkSpan.SetStatus(codes.Error, err.Error())
		chunkSpan.End()
		r.countItemFailures(ctx, st, err)
		return nil, "", e.fail(err, "chunk "+chunk)
	}
	chunkCalls := run.Calls.Calls() - callsBefore
	chunkSpan.SetAttributes(
		attribute.Int64("buildrisk.targets", res.Targets), attribute.Int64("buildrisk.written", res.Written),
		attribute.Int64("buildrisk.skipped", res.Skipped), attribute.Int64("buildrisk.failed", res.Failed),
		attribute.Int64("buildrisk.external_calls", chunkCalls),
	)
	if err := r.checkChunk(ctx, run.Job, chunk, res); err != nil {
		chunkSpan.SetStatus(codes.Error, err.Error())
		chunkSpan.End()
		if flushErr := e.flushCalls(); errors.Is(flushErr, ErrOwnershipLost) {
			return nil, "", &ending{err: flushErr}
		}
		return nil, "", &ending{status: radartype.ExecutionFailed, message: err.Error()}
	}
	newCalls := run.Calls.Calls() - e.callsRecorded
	execStatus, err := r.commitChunk(ctx, rs, chunk, res, int32(chunkCalls), int32(newCalls))
	chunkSpan.End()
	if err != nil {
		return nil, "", e.fail(err, "commit of chunk "+chunk)
	}
	e.callsRecorded += newCalls
	return res, execStatus, nil
}

// maxLostRounds is how many times a run does the same work again because
// the database lost its commits before it stops (cause database): a
// database that keeps losing what it acknowledges is not one to finish on.
const maxLostRounds = 3

// ErrCommitsLost ends a run whose commits the database lost again and
// again (maxLostRounds): it stops with cause database and resumes.
var ErrCommitsLost = errors.New("the database lost acknowledged commits")

// checkParts returns how many of the items the run committed in parts of
// chunk are missing from the database (a failover to an asynchronous
// replica lost them after acknowledging them). Their items leave the run's
// tally, and the loss is counted; the items found are forgotten once all
// are there.
func (r *Runner) checkParts(ctx context.Context, rs *runState, parts *partCommitter, chunk string) (int, error) {
	keys := parts.committedIn(chunk)
	if len(keys) == 0 {
		return 0, nil
	}
	var missing []string
	if err := r.retryTransient(ctx, rs.fenced, rs, func(callCtx context.Context) error {
		var err error
		missing, err = r.queries.JobCheckpointPartMissing(callCtx, r.pool, &queries.JobCheckpointPartMissingParams{
			Items: keys, InstanceID: rs.exec.InstanceID, Chunk: chunk,
		})
		return err
	}); err != nil {
		return 0, fmt.Errorf("error checking the chunk's parts: %w", err)
	}
	parts.forget(chunk, missing)
	if len(missing) == 0 {
		return 0, nil
	}
	rs.items.lose(observability.OutcomeWritten, int64(len(missing)))
	r.cfg.Instruments.CommitsLost(ctx, rs.request.Job, 1)
	rs.logger.WarnContext(ctx, "items committed in parts are missing from the database: doing them again",
		slog.String("chunk", chunk), slog.Int("items", len(missing)))
	return len(missing), nil
}

// uncommittedChunks returns the planned chunks, except those still to do,
// that have no checkpoint, in plan order. At the start they are the chunks
// to do. After that, every chunk the run did not find committed when it
// started, and is not still to do, was committed by it since, so any it
// returns is a commit the database acknowledged and then lost, or one an
// earlier execution made and the database lost.
func (r *Runner) uncommittedChunks(ctx context.Context, rs *runState, plan *Plan, toDo []string) ([]string, error) {
	var done []string
	if err := r.retryTransient(ctx, rs.fenced, rs, func(callCtx context.Context) error {
		var err error
		done, err = r.queries.JobCheckpointListChunks(callCtx, r.pool, rs.exec.InstanceID)
		return err
	}); err != nil {
		return nil, fmt.Errorf("error reading checkpoints: %w", err)
	}
	committed := make(map[string]bool, len(done)+len(toDo))
	for _, c := range done {
		committed[c] = true
	}
	for _, c := range toDo {
		committed[c] = true // not done yet: not lost
	}
	var lost []string
	for _, c := range plan.Chunks {
		if !committed[c] {
			lost = append(lost, c)
		}
	}
	return lost, nil
}

// chunkFigures are the items a committed chunk counted, by outcome.
type chunkFigures struct{ written, skipped, failed int64 }

// noteLostCommits counts and logs the chunks whose commits were lost, and
// takes the items this run committed in them out of its tally, so the
// figures it checks at the end are what the database holds.
func (r *Runner) noteLostCommits(ctx context.Context, rs *runState, lost []string, ran map[string]chunkFigures) {
	for _, chunk := range lost {
		if figures, ok := ran[chunk]; ok {
			rs.items.lose(observability.OutcomeWritten, figures.written)
			rs.items.lose(observability.OutcomeSkipped, figures.skipped)
			rs.items.lose(observability.OutcomeFailed, figures.failed)
			delete(ran, chunk)
		}
	}
	r.cfg.Instruments.CommitsLost(ctx, rs.request.Job, int64(len(lost)))
	rs.logger.WarnContext(ctx, "committed chunks are missing from the database: doing them again",
		slog.Int("chunks", len(lost)), slog.String("first", lost[0]))
}
