package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// maxBreachLines bounds the breach lines printed per invariant.
const maxBreachLines = 8

// report is one soak's outcome.
type report struct {
	seed        int64
	duration    time.Duration
	faults      []faultRow
	faultCounts map[string]int
	faultErrors map[string]int
	requests    map[RequestKind]int
	quiesced    bool
	quiesceTime time.Duration
	figures     []string
	results     []result
	// stuck names the rows (and calls) that kept a run from quiescing.
	stuck []string
	// events are the fault injections, for the per-fault table.
	events []FaultEvent
}

type faultRow struct {
	fault  Fault
	reason string // why it was not injected; "" when it was enabled
}

type result struct {
	inv      Invariant
	breaches []Breach
}

func (r *report) breached() bool {
	for _, res := range r.results {
		if len(res.breaches) > 0 {
			return true
		}
	}
	return !r.quiesced
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\nsoak: seed %d, duration %s; requests sent: valid %d, duplicate %d, invalid %d\n",
		r.seed, r.duration, r.requests[KindValid], r.requests[KindDuplicate], r.requests[KindInvalid])
	quiet := fmt.Sprintf("quiescent after %s", r.quiesceTime.Round(time.Second))
	if !r.quiesced {
		quiet = fmt.Sprintf("NOT quiescent after %s (requests, executions or provider calls still active)", r.quiesceTime.Round(time.Second))
	}
	fmt.Fprintln(w, quiet)
	for i, line := range r.stuck {
		if i == 4*maxBreachLines {
			fmt.Fprintf(w, "  ... and %d more\n", len(r.stuck)-i)
			break
		}
		fmt.Fprintf(w, "  - %s\n", line)
	}

	fmt.Fprintln(w, "\n| fault | injected | what |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, f := range r.faults {
		count := fmt.Sprint(r.faultCounts[f.fault.Name])
		what := f.fault.Description
		if f.reason != "" {
			count = "not injected"
			what += ": " + f.reason
		}
		if n := r.faultErrors[f.fault.Name]; n > 0 {
			what += fmt.Sprintf(" (%d attempts failed; see the log)", n)
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", f.fault.Name, count, what)
	}
	var extra []string
	for name, n := range r.faultCounts {
		if !isFault(name) {
			extra = append(extra, fmt.Sprintf("%s: %d", name, n))
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		fmt.Fprintln(w, "\n"+strings.Join(extra, ", "))
	}

	fmt.Fprintln(w, "\n| invariant | result | |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, res := range r.results {
		verdict := "held"
		if n := len(res.breaches); n > 0 {
			verdict = fmt.Sprintf("BREACHED (%d)", n)
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", res.inv.Name, verdict, res.inv.Description)
	}
	if len(r.results) > 0 {
		fmt.Fprintln(w, "\nper fault kind (a breach at a moment is put down to the latest fault of each stream begun before it):")
		var names, injected []string
		for _, res := range r.results {
			names = append(names, res.inv.Name)
		}
		for _, f := range r.faults {
			if f.reason == "" {
				injected = append(injected, f.fault.Name)
			}
		}
		attributeAll(injected, r.events, r.results).print(w, names)
	}
	for _, res := range r.results {
		if len(res.breaches) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", res.inv.Name)
		for i, b := range res.breaches {
			if i == maxBreachLines {
				fmt.Fprintf(w, "  ... and %d more\n", len(res.breaches)-maxBreachLines)
				break
			}
			fmt.Fprintf(w, "  - %s%s\n", b.Text, blame(r.events, b))
		}
	}
	if len(r.figures) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
		for _, f := range r.figures {
			fmt.Fprintln(tw, f)
		}
		tw.Flush()
	}
}

func isFault(name string) bool {
	for _, f := range faults {
		if f.Name == name {
			return true
		}
	}
	return false
}

// blame is the attribution a breach line carries in the report.
func blame(events []FaultEvent, b Breach) string {
	if b.At.IsZero() {
		return ""
	}
	return " [after " + strings.Join(attribute(events, b.At), ", ") + "]"
}
