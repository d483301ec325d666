package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/queries/testfactory"
)

// A breach is put down to the latest fault of each stream begun at or
// before it; one with no moment is the run's as a whole, one before every
// fault is nobody's.
func TestAttribute(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	events := []FaultEvent{
		{Name: "worker-kill9", Stream: 0, Start: at(10), End: at(12)},
		{Name: "upstream-500", Stream: 1, Start: at(15), End: at(20)},
		{Name: "pg-partition", Stream: 0, Start: at(30), End: at(36)},
		{Name: "upstream-500", Stream: 1, Start: at(40), End: at(45)},
	}
	require.Equal(t, []string{notAtOneMoment}, attribute(events, time.Time{}))
	require.Equal(t, []string{beforeAnyFault}, attribute(events, at(5)))
	require.Equal(t, []string{"worker-kill9"}, attribute(events, at(10)), "a breach as the fault begins is its")
	require.Equal(t, []string{"worker-kill9"}, attribute(events, at(14)), "the window lasts past the fault's end")
	require.Equal(t, []string{"upstream-500", "worker-kill9"}, attribute(events, at(16)), "one per stream")
	require.Equal(t, []string{"pg-partition", "upstream-500"}, attribute(events, at(33)))
	require.Equal(t, []string{"pg-partition", "upstream-500"}, attribute(events, at(99)), "the same name from one stream once")
}

// The per-fault table counts injections and, per invariant, the breaches
// put down to each fault; a fault never injected shows "-", and breaches
// no fault explains get rows of their own.
func TestPerFaultTable(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	events := []FaultEvent{
		{Name: "worker-kill9", Stream: 0, Start: t0.Add(10 * time.Second)},
		{Name: "worker-kill9", Stream: 0, Start: t0.Add(20 * time.Second)},
		{Name: "pg-kill9", Stream: 0, Start: t0.Add(30 * time.Second)},
	}
	results := []result{
		{inv: Invariant{Name: "no-overlap"}, breaches: []Breach{{At: t0.Add(25 * time.Second), Text: "a"}, {At: t0.Add(31 * time.Second), Text: "b"}}},
		{inv: Invariant{Name: "counters"}, breaches: []Breach{{Text: "c"}}},
		{inv: Invariant{Name: "no-500"}, breaches: []Breach{{At: t0, Text: "d"}}},
	}
	pf := attributeAll([]string{"worker-kill9", "pg-kill9", "disk-full"}, events, results)
	var out strings.Builder
	pf.print(&out, []string{"no-overlap", "counters", "no-500"})
	got := out.String()
	require.Contains(t, got, "| fault | injected | no-overlap | counters | no-500 |")
	require.Contains(t, got, "| worker-kill9 | 2 | BREACHED (1) | held | held |")
	require.Contains(t, got, "| pg-kill9 | 1 | BREACHED (1) | held | held |")
	require.Contains(t, got, "| disk-full | 0 | - | - | - |")
	require.Contains(t, got, "| "+notAtOneMoment+" |  | held | BREACHED (1) | held |")
	require.Contains(t, got, "| "+beforeAnyFault+" |  | held | held | BREACHED (1) |")
}

// A run that did not quiesce names the rows that kept it busy, and each
// breach line says which faults it is put down to.
func TestReport_StuckAndBlame(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	rep := &report{
		seed: 7, faultCounts: map[string]int{},
		faults: []faultRow{{fault: Fault{Name: "worker-sigstop"}}},
		stuck:  []string{`execution 12 (aptTrade) STARTED, owner "w1", age 3m0s, last touched 2m0s ago`},
		events: []FaultEvent{{Name: "worker-sigstop", Start: t0}},
		results: []result{{inv: Invariant{Name: "no-overlap"}, breaches: []Breach{
			{At: t0.Add(time.Second), Text: "overlap"}, {Text: "whole"},
		}}},
	}
	var out strings.Builder
	rep.print(&out)
	got := out.String()
	require.Contains(t, got, "NOT quiescent")
	require.Contains(t, got, `  - execution 12 (aptTrade) STARTED, owner "w1"`)
	require.Contains(t, got, "  - overlap [after worker-sigstop]")
	require.Contains(t, got, "  - whole\n")
	require.Contains(t, got, "| worker-sigstop | 1 | BREACHED (1) |")
	require.True(t, rep.breached())
}

// A process cut off (partitioned, stopped) for longer than the stale
// window is dead to the system from the cut-off's start until a stale
// window after its end; a shorter cut-off exempts nothing.
func TestProcessRecord_CutOffAt(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	stale := 4 * time.Second
	p := &ProcessRecord{CutOff: []Outage{{Start: t0, End: t0.Add(6 * time.Second)}, {Start: t0.Add(time.Minute), End: t0.Add(time.Minute + 2*time.Second)}}}
	require.False(t, p.cutOffAt(t0.Add(-time.Millisecond), stale))
	require.True(t, p.cutOffAt(t0.Add(5*time.Second), stale))
	require.True(t, p.cutOffAt(t0.Add(10*time.Second), stale))
	require.False(t, p.cutOffAt(t0.Add(11*time.Second), stale))
	require.False(t, p.cutOffAt(t0.Add(time.Minute+time.Second), stale), "shorter than the stale window")
}

// A breached run leaves the tables a breach is confirmed from in its log
// directory, one CSV each, rows and all.
func TestDumpTables(t *testing.T) {
	t.Parallel()
	d := newAuditedDB(t)
	w := d.as("soak-worker-1.1")
	exec, inst := startExecution(t, w, "creditEval", "w1", 0)
	commitChunk(t, w, exec, inst, "00100000-00200000", 1, 1, 0, 0)
	testfactory.ProviderCallBudget(context.Background(), t, w, &testfactory.ProviderCallBudgetOpts{Provider: "CREDIT", CallsUsed: 8})
	testfactory.ProviderCallLease(context.Background(), t, w, &testfactory.ProviderCallLeaseOpts{Provider: "CREDIT", Holder: "w1", Granted: 8, Claimed: 5})
	s := &system{cfg: &config{dir: t.TempDir()}, db: d.pool}
	require.NoError(t, s.dumpTables(context.Background()))
	calls := filepath.Join(s.cfg.dir, "calls.csv")
	require.NoError(t, dumpCalls(calls, []UpstreamCall{
		{At: time.Now(), Endpoint: "creditLookup", Params: map[string]string{"corpCode": "2"}, Status: 200},
		{At: time.Now().Add(-time.Second), Endpoint: "creditLookup", Params: map[string]string{"corpCode": "1"}, Status: 500},
	}))
	b, err := os.ReadFile(calls)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 3)
	require.Contains(t, lines[1], "creditLookup,corpCode=1,500,false", "in the order the calls were made")
	for _, table := range dumpedTables {
		b, err := os.ReadFile(filepath.Join(s.cfg.dir, table+".csv"))
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		require.Greater(t, len(lines), 1, "%s: a header and rows", table)
	}
}
