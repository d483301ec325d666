package upstream

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/observability"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/sql/pgtx"
)

// This file is the daily cap without a round trip per call. A Caller takes
// the provider's cap in leases: blocks of calls moved from the day's budget
// row (provider_call_budget, shared by every worker) into a lease row of its
// own. Calls are then counted in memory. Before it makes calls a Caller marks
// them claimed on its lease row, a step at a time (no other worker touches
// that row, so there is no lock to wait for); when the run ends it returns
// what it did not spend. If the worker dies, its lease expires: the calls it
// never claimed go back to the budget, the claimed ones stay spent because
// they may have been made. The budget row's calls_used therefore never falls
// below the calls really made, and never exceeds the cap.

// Defaults of the lease fields of ClientConfig.
const (
	// LeaseSpanDefault is how many seconds of calls a lease covers, at the
	// rate the previous lease was spent.
	LeaseSpanDefault = 3 * time.Second
	// LeaseTTLDefault is how long a lease lives without a claim; a dead
	// worker's unclaimed calls come back after it.
	LeaseTTLDefault = 30 * time.Second
	// CapWaitDefault is how often a Caller that found the day's budget empty
	// looks again while other leases are open (their leftovers may come
	// back).
	CapWaitDefault = 100 * time.Millisecond
	// claimSteps is how many claims a lease is marked claimed in: a dead
	// worker leaves at most one step, or FanOut calls, unaccounted for.
	claimSteps = 8
)

// lease is a block of one provider's daily cap held by a Caller.
type lease struct {
	id       int64
	provider Provider
	day      time.Time
	granted  int
	claimed  int // marked on the lease row; calls beyond it need a claim
	spent    int // calls made (in memory)
	takenAt  time.Time
	// claiming is set while a claim ahead is on its way; dead once a claim
	// found the lease expired (its unclaimed calls went back).
	claiming, dead bool
	// closed once the Caller no longer spends it (returned, or found
	// expired); caller took it. Both serve the ledger (ledger.go), which
	// reads the lease under caller.mu.
	closed bool
	caller *Caller
}

// take reserves one call of provider p's daily cap for the caller: from its
// lease in memory when it can, else by claiming the next step of the lease or
// taking a new one. It returns a *CapError once the day's cap is spent and no
// other lease is open whose leftovers could come back.
func (cl *Caller) take(ctx context.Context, p Provider) error {
	c := cl.client
	limit := c.cfg.DailyCaps[p]
	if limit <= 0 {
		return cl.capped(ctx, p, limit)
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for {
		today := c.Today()
		if day, ok := cl.cappedOn[p]; ok && day.Equal(today) {
			return cl.capped(ctx, p, limit)
		}
		l := cl.leases[p]
		if l != nil && !l.day.Equal(today) {
			// A new day: yesterday's lease goes back, today's budget applies.
			if err := cl.giveBack(ctx, p, l); err != nil {
				return err
			}
			l = nil
		}
		if l != nil {
			if l.spent < l.claimed {
				l.spent++
				// Claim the next step before this one runs out, off the
				// callers' path: a call then never waits for a round trip.
				if !l.claiming && !l.dead && l.claimed < l.granted && l.claimed-l.spent <= cl.claimStep(l.granted)/2 {
					l.claiming = true
					cl.ahead.Add(1)
					go cl.claimAhead(l)
				}
				return nil
			}
			if l.claiming {
				cl.claimed.Wait() // the claim ahead is on its way
				continue
			}
			if l.dead {
				l.closed = true
				delete(cl.leases, p)
			} else if l.claimed < l.granted {
				claimed := min(l.granted, l.claimed+cl.claimStep(l.granted))
				n, err := c.queries.ProviderCallLeaseClaim(ctx, c.pool, &queries.ProviderCallLeaseClaimParams{
					ID: l.id, Holder: c.cfg.Holder, Claimed: int32(claimed), TtlSeconds: c.cfg.LeaseTTL.Seconds(),
				})
				if err != nil {
					return fmt.Errorf("error claiming calls of a lease: %w", err)
				}
				if n == 1 {
					l.claimed = claimed
					l.spent++
					return nil
				}
				// The lease expired meanwhile: a sweep gave its unclaimed
				// calls back (every call made was claimed). Take a new one.
				l.closed = true
				delete(cl.leases, p)
			} else {
				cl.noteRate(p, l)
				if err := cl.giveBack(ctx, p, l); err != nil { // fully spent: just closes it
					return err
				}
			}
		}
		// A lease is charged to the database's day: read its clock again
		// (one round trip per lease, none per call).
		if err := c.syncClock(ctx, c.pool); err == nil {
			today = c.Today()
		}
		l, open, err := c.takeLease(ctx, p, today, cl.leaseWant(p, limit))
		if err != nil {
			return err
		}
		if l != nil {
			l.spent = 1
			cl.leases[p] = l
			c.ledger.remember(l, cl)
			return nil
		}
		if open == 0 {
			// Nothing left and no lease whose leftovers could come back:
			// the cap is spent for the day.
			cl.cappedOn[p] = today
			return cl.capped(ctx, p, limit)
		}
		// Other leases are open; what they do not spend comes back when
		// their runs end or they expire.
		cl.mu.Unlock()
		select {
		case <-ctx.Done():
			cl.mu.Lock()
			return ctx.Err()
		case <-time.After(c.cfg.CapWait):
		}
		cl.mu.Lock()
	}
}

// claimAhead marks the lease's next step claimed while its callers spend
// the current one.
func (cl *Caller) claimAhead(l *lease) {
	defer cl.ahead.Done()
	c := cl.client
	cl.mu.Lock()
	target := min(l.granted, l.claimed+cl.claimStep(l.granted))
	cl.mu.Unlock()
	n, err := c.queries.ProviderCallLeaseClaim(context.Background(), c.pool, &queries.ProviderCallLeaseClaimParams{
		ID: l.id, Holder: c.cfg.Holder, Claimed: int32(target), TtlSeconds: c.cfg.LeaseTTL.Seconds(),
	})
	cl.mu.Lock()
	defer cl.mu.Unlock()
	l.claiming = false
	if err == nil && n == 1 {
		l.claimed = max(l.claimed, target)
	} else {
		// Expired (or unreachable): spend no more than what is claimed;
		// the next call takes a new lease.
		l.dead = true
	}
	cl.claimed.Broadcast()
}

func (cl *Caller) capped(ctx context.Context, p Provider, limit int) error {
	cl.client.cfg.Instruments.ExternalCall(ctx, string(p), observability.CallCapped)
	return &CapError{Provider: p, Cap: limit}
}

// claimStep is how many calls one claim marks: an eighth of the lease, never
// fewer than the fan-out (so a full pool of slots passes with one claim).
func (cl *Caller) claimStep(granted int) int {
	return max(cl.client.cfg.FanOut, granted/claimSteps)
}

// leaseWant sizes the next lease: LeaseSpan seconds of calls at the rate the
// previous lease was spent, at least two rounds of the fan-out, at most a
// tenth of the cap (so that several workers share a small cap).
func (cl *Caller) leaseWant(p Provider, limit int) int {
	fanOut := cl.client.cfg.FanOut
	want := 2 * fanOut
	if rate := cl.rate[p]; rate > 0 {
		want = int(math.Ceil(rate * cl.client.cfg.LeaseSpan.Seconds()))
	}
	return max(fanOut, min(want, max(2*fanOut, limit/10)))
}

// noteRate records the calls per second at which a fully spent lease went.
func (cl *Caller) noteRate(p Provider, l *lease) {
	if elapsed := time.Since(l.takenAt); elapsed > 0 {
		cl.rate[p] = float64(l.spent) / elapsed.Seconds()
	}
}

// giveBack closes the lease, returning its unspent calls to the day's
// budget, and forgets it.
func (cl *Caller) giveBack(ctx context.Context, p Provider, l *lease) error {
	c := cl.client
	delete(cl.leases, p)
	l.closed = true
	_, err := c.queries.ProviderCallLeaseReturn(context.WithoutCancel(ctx), c.pool, &queries.ProviderCallLeaseReturnParams{
		ID: l.id, Holder: c.cfg.Holder, Spent: int32(l.spent),
	})
	if err := queries.Interpret(err); err != nil && !errors.Is(err, queries.ErrNotFound) {
		return fmt.Errorf("error returning a call lease: %w", err)
	}
	// No row: the lease had expired and a sweep already gave back its
	// unclaimed calls (spent ≤ claimed, so nothing more is owed).
	if l.granted > l.spent {
		c.recordRemaining(ctx, p)
	}
	return nil
}

// Release returns the unspent calls of every lease the Caller holds to the
// day's budget. The runner calls it when a run ends, whatever the outcome
// (completed, failed, stopped, capped, drained), so budget never sits in a
// finished run. The Caller stays usable: a later call takes a new lease.
func (cl *Caller) Release(ctx context.Context) error {
	cl.ahead.Wait() // claims ahead end first; they take the lock
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var errs []error
	for p, l := range cl.leases {
		errs = append(errs, cl.giveBack(ctx, p, l))
	}
	return errors.Join(errs...)
}

// takeLease moves up to want calls of p's cap for day into a new lease, in
// one short transaction under the budget row's lock, after giving back the
// unclaimed calls of expired leases. It returns a nil lease when nothing is
// left, with the number of other open leases.
func (c *Client) takeLease(ctx context.Context, p Provider, day time.Time, want int) (*lease, int, error) {
	limit := c.cfg.DailyCaps[p]
	var l *lease
	var open int32
	var usedAfter int
	err := pgtx.InTx(ctx, c.pool, func(tx pgx.Tx) error {
		l, open = nil, 0
		used, err := c.queries.ProviderCallBudgetLock(ctx, tx, &queries.ProviderCallBudgetLockParams{Provider: string(p), Day: day})
		if err != nil {
			return fmt.Errorf("error locking call budget: %w", err)
		}
		freed, err := c.queries.ProviderCallLeaseExpire(ctx, tx, &queries.ProviderCallLeaseExpireParams{Provider: string(p), Day: day})
		if err != nil {
			return fmt.Errorf("error expiring call leases: %w", err)
		}
		usedNow := int(used) - int(freed)
		granted := min(want, limit-usedNow)
		if granted <= 0 {
			if freed > 0 {
				if err := c.queries.ProviderCallBudgetSet(ctx, tx, &queries.ProviderCallBudgetSetParams{Provider: string(p), Day: day, CallsUsed: int32(usedNow)}); err != nil {
					return fmt.Errorf("error updating call budget: %w", err)
				}
			}
			open, err = c.queries.ProviderCallLeaseCountOpen(ctx, tx, &queries.ProviderCallLeaseCountOpenParams{Provider: string(p), Day: day})
			if err != nil {
				return fmt.Errorf("error counting call leases: %w", err)
			}
			usedAfter = usedNow
			return nil
		}
		if err := c.queries.ProviderCallBudgetSet(ctx, tx, &queries.ProviderCallBudgetSetParams{Provider: string(p), Day: day, CallsUsed: int32(usedNow + granted)}); err != nil {
			return fmt.Errorf("error updating call budget: %w", err)
		}
		claimed := min(granted, max(c.cfg.FanOut, granted/claimSteps))
		id, err := c.queries.ProviderCallLeaseInsert(ctx, tx, &queries.ProviderCallLeaseInsertParams{
			Provider: string(p), Day: day, Holder: c.cfg.Holder, Granted: int32(granted), Claimed: int32(claimed),
			TtlSeconds: c.cfg.LeaseTTL.Seconds(),
		})
		if err != nil {
			return fmt.Errorf("error recording call lease: %w", err)
		}
		l = &lease{id: id, provider: p, day: day, granted: granted, claimed: claimed, takenAt: time.Now()}
		usedAfter = usedNow + claimed // the rest of the lease is not spent yet
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	c.cfg.Instruments.ProviderCallsRemainingSet(ctx, string(p), int64(max(limit-usedAfter, 0)))
	return l, int(open), nil
}

// recordRemaining refreshes the calls-remaining gauge of p from the database.
func (c *Client) recordRemaining(ctx context.Context, p Provider) {
	if remaining, err := c.Remaining(context.WithoutCancel(ctx), p); err == nil {
		c.cfg.Instruments.ProviderCallsRemainingSet(ctx, string(p), int64(remaining))
	}
}
