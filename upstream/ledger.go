package upstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/sql/pgtx"
)

// This file re-asserts the call ledger after a failover. With asynchronous
// replication the promoted primary may lack the last leases a worker took
// (their grants in provider_call_budget with them) and the charges of the
// leases it closed: the calls made through them would then count for
// nothing, and the day's cap could be overrun by every call made in the
// lag window. The worker knows them: the Client remembers every lease its
// Callers took (today's and yesterday's), and Reassert, run after each
// failover, puts back what the new primary lacks.

// ledger is the Client's memory of the leases its Callers took.
type ledger struct {
	mu     sync.Mutex
	leases []*lease
}

// remember adds l, taken by cl, and forgets leases older than yesterday.
func (lg *ledger) remember(l *lease, cl *Caller) {
	l.caller = cl
	lg.mu.Lock()
	defer lg.mu.Unlock()
	kept := lg.leases[:0]
	for _, old := range lg.leases {
		if !old.day.Before(l.day.AddDate(0, 0, -1)) {
			kept = append(kept, old)
		}
	}
	lg.leases = append(kept, l)
}

// snapshot returns the leases remembered.
func (lg *ledger) snapshot() []*lease {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	return append([]*lease(nil), lg.leases...)
}

// Reassert charges again, on the database the pool reaches now, every
// lease the Client took or closed whose charge that database lacks: a
// lease still held whose row is gone is put back under its id with its
// grant charged to the day's budget; a closed lease with neither its row
// nor its charge has its spent calls charged; a closed lease whose row is
// still open (its return was lost) is returned again. Each call made that
// was charged again counts buildrisk_ledger_reasserted_calls_total{provider}.
// The worker runs it after each failover it sees (DatabaseWatch); it is
// idempotent. It errs on the side of charging: a lease a sweep expired
// under its live holder (idle past LeaseTTL) has no charge record either,
// and its spent calls are charged once more (at most one lease's worth).
// It returns the calls made that were charged again, per provider.
func (c *Client) Reassert(ctx context.Context) (map[Provider]int, error) {
	leases := c.ledger.snapshot()
	if len(leases) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(leases))
	for i, l := range leases {
		ids[i] = l.id
	}
	rows, err := c.queries.ProviderCallLedgerState(ctx, c.pool, &queries.ProviderCallLedgerStateParams{Holder: c.cfg.Holder, IDs: ids})
	if err != nil {
		return nil, fmt.Errorf("error reading the call ledger: %w", err)
	}
	state := make(map[int64]*queries.ProviderCallLedgerStateRow, len(rows))
	for _, r := range rows {
		state[r.ID] = r
	}
	charged := map[Provider]int{}
	var errs []error
	for _, l := range leases {
		n, err := c.reassertLease(ctx, l, state[l.id])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n > 0 {
			p := l.provider
			charged[p] += n
			c.cfg.Instruments.LedgerReasserted(ctx, string(p), int64(n))
			c.recordRemaining(ctx, p)
		}
	}
	if len(charged) > 0 {
		c.cfg.Logger.WarnContext(ctx, "call ledger re-asserted after a failover: calls the new primary had not charged are charged again",
			"charged", fmt.Sprint(charged))
	}
	return charged, errors.Join(errs...)
}

// reassertLease re-asserts one lease under its Caller's lock (no claim or
// return of it runs meanwhile) and returns the calls charged again.
func (c *Client) reassertLease(ctx context.Context, l *lease, state *queries.ProviderCallLedgerStateRow) (int, error) {
	if state == nil || state.Charged {
		return 0, nil
	}
	cl := l.caller
	cl.mu.Lock()
	defer cl.mu.Unlock()
	switch {
	case !l.closed && state.LeaseOpen:
		return 0, nil
	case !l.closed:
		return c.reinsertLease(ctx, l)
	case state.LeaseOpen:
		// Closed here, open there: the return was lost. Return it again.
		_, err := c.queries.ProviderCallLeaseReturn(ctx, c.pool, &queries.ProviderCallLeaseReturnParams{ID: l.id, Holder: c.cfg.Holder, Spent: int32(l.spent)})
		if err := queries.Interpret(err); err != nil && !errors.Is(err, queries.ErrNotFound) {
			return 0, fmt.Errorf("error returning a call lease again: %w", err)
		}
		return 0, nil
	default:
		return c.chargeClosed(ctx, l)
	}
}

// reinsertLease puts back a lease still held whose row the failover lost,
// charging its grant again; if its id now names another lease, the lease
// is dropped (its spent calls charged) and the next call takes a new one.
func (c *Client) reinsertLease(ctx context.Context, l *lease) (int, error) {
	var n int
	err := pgtx.InTx(ctx, c.pool, func(tx pgx.Tx) error {
		n = 0
		rows, err := c.queries.ProviderCallLeaseReinsert(ctx, tx, &queries.ProviderCallLeaseReinsertParams{
			ID: l.id, Provider: string(l.provider), Day: l.day, Holder: c.cfg.Holder,
			Granted: int32(l.granted), Claimed: int32(min(l.granted, max(l.claimed, l.spent))), TtlSeconds: c.cfg.LeaseTTL.Seconds(),
		})
		if err != nil {
			return fmt.Errorf("error putting back a call lease: %w", err)
		}
		charge := l.granted
		if rows == 0 {
			charge = l.spent
			if _, err := c.queries.ProviderCallChargeInsert(ctx, tx, &queries.ProviderCallChargeInsertParams{
				LeaseID: l.id, Holder: c.cfg.Holder, Provider: string(l.provider), Day: l.day, Spent: int32(l.spent),
			}); err != nil {
				return fmt.Errorf("error recording a call charge: %w", err)
			}
		}
		if err := c.queries.ProviderCallBudgetAdd(ctx, tx, &queries.ProviderCallBudgetAddParams{Provider: string(l.provider), Day: l.day, Calls: int32(charge)}); err != nil {
			return fmt.Errorf("error charging a call lease again: %w", err)
		}
		n = l.spent // the rest of the grant is a reservation, not calls made
		if rows == 0 {
			// Spend nothing more of it: the next call takes a new lease.
			l.dead, l.claimed = true, l.spent
		}
		return nil
	})
	return n, err
}

// chargeClosed charges the spent calls of a closed lease whose grant the
// failover lost, recording the charge so that it is made once.
func (c *Client) chargeClosed(ctx context.Context, l *lease) (int, error) {
	if l.spent == 0 {
		return 0, nil
	}
	var n int
	err := pgtx.InTx(ctx, c.pool, func(tx pgx.Tx) error {
		n = 0
		rows, err := c.queries.ProviderCallChargeInsert(ctx, tx, &queries.ProviderCallChargeInsertParams{
			LeaseID: l.id, Holder: c.cfg.Holder, Provider: string(l.provider), Day: l.day, Spent: int32(l.spent),
		})
		if err != nil {
			return fmt.Errorf("error recording a call charge: %w", err)
		}
		if rows == 0 {
			return nil
		}
		if err := c.queries.ProviderCallBudgetAdd(ctx, tx, &queries.ProviderCallBudgetAddParams{Provider: string(l.provider), Day: l.day, Calls: int32(l.spent)}); err != nil {
			return fmt.Errorf("error charging spent calls again: %w", err)
		}
		n = l.spent
		return nil
	})
	return n, err
}

// reassertTimeout bounds a Reassert started by a failover.
const reassertTimeout = time.Minute

// ReassertAfterFailover runs Reassert in the background, bounded by
// reassertTimeout, logging a failure: what a database watch's subscriber
// calls (it must return at once).
func (c *Client) ReassertAfterFailover() {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), reassertTimeout)
		defer cancel()
		if _, err := c.Reassert(ctx); err != nil {
			c.cfg.Logger.WarnContext(ctx, "could not re-assert the call ledger after a failover", "error", err.Error())
		}
	}()
}
