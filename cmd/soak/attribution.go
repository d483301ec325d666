package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// FaultEvent is one injection of a fault: which fault, in which stream, and
// when it began and ended (undone included).
type FaultEvent struct {
	Name       string
	Stream     int
	Start, End time.Time
}

// beforeAnyFault and notAtOneMoment are the attribution rows of breaches
// that no injected fault precedes, and of breaches of the run as a whole.
const (
	beforeAnyFault = "(before any fault)"
	notAtOneMoment = "(the run as a whole)"
)

// attribute names the faults a breach at t is put down to: in each fault
// stream, the most recent injection begun at or before t (one still under
// way, or the last one, whose window lasts until the stream's next fault).
// A breach with no moment is the run's as a whole; one before every fault
// is put down to none.
func attribute(events []FaultEvent, t time.Time) []string {
	if t.IsZero() {
		return []string{notAtOneMoment}
	}
	latest := latestEvents(events, t)
	if len(latest) == 0 {
		return []string{beforeAnyFault}
	}
	var out []string
	for _, i := range latest {
		if !containsString(out, events[i].Name) {
			out = append(out, events[i].Name)
		}
	}
	sort.Strings(out)
	return out
}

// latestEvents returns the injections a moment t is put down to, as
// indices into events: in each fault stream, the most recent one begun at
// or before t. None when no fault had begun by then.
func latestEvents(events []FaultEvent, t time.Time) []int {
	latest := map[int]int{}
	for i, e := range events {
		if e.Start.After(t) {
			continue
		}
		if cur, ok := latest[e.Stream]; !ok || e.Start.After(events[cur].Start) {
			latest[e.Stream] = i
		}
	}
	out := make([]int, 0, len(latest))
	for _, i := range latest {
		out = append(out, i)
	}
	sort.Ints(out)
	return out
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// perFault is the per fault kind view of a run: how often each fault was
// injected and, per invariant, how many breaches were put down to it.
type perFault struct {
	// rows are the fault kinds in table order, then the attribution rows
	// of breaches no fault explains (only when they have breaches).
	rows     []string
	injected map[string]int
	// breaches[row][invariant] counts the breaches attributed to row.
	breaches map[string]map[string]int
}

// attributeAll builds the per-fault view from the fault events and the
// invariants' results. A breach attributed to two faults (one per stream)
// counts for both.
func attributeAll(faultNames []string, events []FaultEvent, results []result) perFault {
	pf := perFault{injected: map[string]int{}, breaches: map[string]map[string]int{}}
	for _, e := range events {
		pf.injected[e.Name]++
	}
	pf.rows = append(pf.rows, faultNames...)
	for _, res := range results {
		for _, b := range res.breaches {
			for _, row := range attribute(events, b.At) {
				if pf.breaches[row] == nil {
					pf.breaches[row] = map[string]int{}
				}
				pf.breaches[row][res.inv.Name]++
				if !containsString(pf.rows, row) {
					pf.rows = append(pf.rows, row)
				}
			}
		}
	}
	return pf
}

// print writes the per-fault table: a row per fault kind, its injections,
// then a column per invariant with "held" or the breaches put down to it
// ("-" for a fault never injected, whose windows do not exist).
func (pf perFault) print(w io.Writer, invariants []string) {
	fmt.Fprintf(w, "\n| fault | injected | %s |\n", strings.Join(invariants, " | "))
	fmt.Fprintf(w, "|---|---|%s\n", strings.Repeat("---|", len(invariants)))
	for _, row := range pf.rows {
		n := pf.injected[row]
		injected := fmt.Sprint(n)
		if row == beforeAnyFault || row == notAtOneMoment {
			injected = ""
		}
		cells := make([]string, len(invariants))
		for i, inv := range invariants {
			switch b := pf.breaches[row][inv]; {
			case b > 0:
				cells[i] = fmt.Sprintf("BREACHED (%d)", b)
			case n == 0 && injected != "":
				cells[i] = "-"
			default:
				cells[i] = "held"
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", row, injected, strings.Join(cells, " | "))
	}
}
