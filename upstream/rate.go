package upstream

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/buildrisk/radar/queries"
)

// This file is the fleet-wide rate limit of a provider (BUILDRISK_RATE_<P>)
// without a round trip per call. The fleet shares one schedule of send slots
// per provider, a row of provider_rate holding the "theoretical arrival
// time" (tat) of the generic cell rate algorithm on the database's clock: the
// moment the next unreserved slot begins. A Client reserves a block of k
// slots in one statement (tat = greatest(tat, now()) + k/rate) and hands them
// out in memory, one every 1/rate seconds from the block's start; the blocks
// of all workers are disjoint stretches of the one schedule, so together
// they never send faster than the rate. A slot whose moment passed unused is
// wasted, never saved up: the limit is what matters, not using every slot.
//
// A 429 (with its Retry-After, or the backoff when it has none) pushes the
// shared tat to now()+wait, so every worker's next block begins after it,
// and pauses this Client's dispenser at once: the rest of its block is
// dropped and slots already handed out but not yet due are void.
//
// The database's clock orders the schedule; a process only ever turns "the
// block begins d after the statement ran" into a local deadline, counted
// from when the answer came back, which is never earlier than the statement
// ran. Process clocks may therefore differ from the database's and from
// each other without a worker ever sending ahead of its slot.

// RateBlockSpanDefault is the longest stretch of the fleet's schedule one
// block reserves: 250 ms of calls at the provider's rate. Longer blocks cost
// fewer round trips but let one worker hold slots another could use.
const RateBlockSpanDefault = 250 * time.Millisecond

// rateLimiter dispenses one provider's send slots to the callers of a
// Client. Its methods are safe for concurrent use.
type rateLimiter struct {
	client   *Client
	provider Provider
	rate     float64 // calls per second, the whole fleet
	maxBlock int     // the most slots a block holds (RateBlockSpan of calls)

	// gen is bumped by every pause: a slot handed out under an older
	// generation is void once its moment comes.
	gen atomic.Uint64

	// lock is a mutex a caller can stop waiting for when its context ends;
	// it is held while a block is taken from the database.
	lock chan struct{}

	// Guarded by lock.
	start       time.Time // local moment of the block's slot 0
	size        int       // slots in the block; 0 when there is none
	next        int       // index of the next slot to hand out
	used        int       // slots of the block handed out
	want        int       // size of the next block
	pausedUntil time.Time // no slot before this (a Retry-After)
}

func newRateLimiter(c *Client, p Provider, rate float64) *rateLimiter {
	maxBlock := max(1, int(rate*c.cfg.RateBlockSpan.Seconds()))
	return &rateLimiter{
		client: c, provider: p, rate: rate, maxBlock: maxBlock,
		want: min(c.cfg.FanOut, maxBlock),
		lock: make(chan struct{}, 1),
	}
}

func (rl *rateLimiter) acquire(ctx context.Context) error {
	select {
	case rl.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (rl *rateLimiter) release() { <-rl.lock }

// wait returns when the caller may send one call: at its slot of the
// fleet's schedule. It returns ctx's error as soon as ctx ends (a drain, a
// stop, a lost ownership), having sent nothing.
func (rl *rateLimiter) wait(ctx context.Context) error {
	for {
		if err := rl.acquire(ctx); err != nil {
			return err
		}
		now := time.Now()
		if now.Before(rl.pausedUntil) {
			until := rl.pausedUntil
			rl.release()
			if err := sleepUntil(ctx, until); err != nil {
				return err
			}
			continue
		}
		if i := rl.slotIndex(now); i < rl.size {
			rl.next, rl.used = i+1, rl.used+1
			at, gen := rl.slotTime(i), rl.gen.Load()
			rl.release()
			if err := sleepUntil(ctx, at); err != nil {
				return err
			}
			if rl.gen.Load() != gen {
				continue // a 429 paused the schedule meanwhile: this slot is void
			}
			return nil
		}
		err := rl.takeBlock(ctx)
		rl.release()
		if err != nil {
			return err
		}
	}
}

// slotIndex returns the next slot of the block not in the past; the
// caller holds the lock.
func (rl *rateLimiter) slotIndex(now time.Time) int {
	i := rl.next
	if rl.size == 0 {
		return i
	}
	if behind := now.Sub(rl.start).Seconds() * rl.rate; behind > float64(i) {
		i = int(min(math.Ceil(behind), float64(rl.size))) // unused slots are wasted
	}
	return i
}

// slotTime returns the local moment of slot i of the block, rounded up.
func (rl *rateLimiter) slotTime(i int) time.Time {
	return rl.start.Add(time.Duration(math.Ceil(float64(i) * 1e9 / rl.rate)))
}

// blockSpan returns how long k slots last at the rate, rounded up to the
// microsecond (the database's resolution), so that consecutive blocks never
// overlap.
func (rl *rateLimiter) blockSpan(k int) time.Duration {
	return time.Duration(math.Ceil(float64(k)*1e6/rl.rate)) * time.Microsecond
}

// takeBlock reserves the next block of the shared schedule; the caller
// holds the lock. A block is sized by the use of the previous one (twice
// the slots handed out, at least 1, at most maxBlock), so a worker that
// calls slowly does not hold slots the fleet could use, and one that keeps
// up takes fewer round trips.
func (rl *rateLimiter) takeBlock(ctx context.Context) error {
	c := rl.client
	if rl.size > 0 {
		rl.want = min(max(2*rl.used, 1), rl.maxBlock)
	}
	span := rl.blockSpan(rl.want)
	row, err := c.queries.ProviderRateTake(ctx, c.pool, &queries.ProviderRateTakeParams{
		Provider: string(rl.provider), SpanSeconds: span.Seconds(),
	})
	if err != nil {
		return fmt.Errorf("error reserving calls of the %s rate limit: %w", rl.provider, err)
	}
	// Both moments are the database's; the block begins that long after
	// the statement ran, counted from now, when the answer is back.
	startIn := max(row.Tat.Add(-span).Sub(row.DbNow), 0)
	rl.start = time.Now().Add(startIn)
	rl.size, rl.next, rl.used = rl.want, 0, 0
	return nil
}

// pause holds back every slot of the provider for wait: this Client's at
// once (the rest of its block is dropped, slots handed out are void), the
// fleet's by pushing the shared schedule to wait from now.
func (rl *rateLimiter) pause(ctx context.Context, wait time.Duration) error {
	ctx = context.WithoutCancel(ctx) // the fleet must hear of it even if this run stops
	if err := rl.acquire(ctx); err != nil {
		return err
	}
	rl.gen.Add(1)
	if until := time.Now().Add(wait); until.After(rl.pausedUntil) {
		rl.pausedUntil = until
	}
	rl.size, rl.next = 0, 0
	rl.release()
	c := rl.client
	if err := c.queries.ProviderRatePush(ctx, c.pool, &queries.ProviderRatePushParams{
		Provider: string(rl.provider), WaitSeconds: wait.Seconds(),
	}); err != nil {
		return fmt.Errorf("error pushing back the %s rate limit: %w", rl.provider, err)
	}
	return nil
}

// sleepUntil waits until t or until ctx ends, and returns ctx's error in
// the latter case.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
