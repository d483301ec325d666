package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/observability"
)

// This file is `make bench` (BUILDRISK_BENCH=full) and `make bench-smoke`
// (BUILDRISK_BENCH=smoke, seconds long, run by CI so the table cannot rot).
// Every row is measured beside its reference in the same run, repeated, and
// printed as median (min–max); the full run also writes the table into
// BENCHMARKS.md between its markers.

// benchScale sizes one mode of the table.
type benchScale struct {
	mode         string
	reps         int
	creditN      int           // creditEval targets per fan-out run
	cpuN         int           // creditEval targets of the CPU-bound row (0 ms calls)
	latency      time.Duration // provider latency of the fan-out rows
	pickups      int           // pickup samples per repetition and mode (a p99 needs a few hundred)
	chunkRegions int           // aptTrade regions (× 12 months) per per-chunk run
	chunkReps    int           // repetitions of the per-chunk row (cheap, noisy: more than reps)
	jobsGets     int           // GET /v1/jobs per measurement
	jobsBig      int           // executions in history for the big /v1/jobs row
	importSmall  int
	importBig    int
	workerSmall  int // creditEval targets for worker memory
	workerBig    int
	scaleChunks  int // chunks per job in the scale-out row
	// historyTurns turns of historyTurn each side per measurement of the
	// history group (benchInterleaved).
	historyTurns int
	historyTurn  time.Duration
}

func benchScaleFor(mode string) benchScale {
	if mode == "full" {
		return benchScale{mode: mode, reps: 3, creditN: 4000, cpuN: 30_000, latency: 20 * time.Millisecond, pickups: 200,
			chunkRegions: 20, chunkReps: 15, jobsGets: 300, jobsBig: 100_000, importSmall: 10_000, importBig: 200_000,
			workerSmall: 10_000, workerBig: 200_000, scaleChunks: 20, historyTurns: 10, historyTurn: 100 * time.Millisecond}
	}
	return benchScale{mode: mode, reps: 1, creditN: 300, cpuN: 300, latency: 5 * time.Millisecond, pickups: 6,
		chunkRegions: 1, chunkReps: 1, jobsGets: 20, jobsBig: 5_000, importSmall: 1_000, importBig: 5_000,
		workerSmall: 300, workerBig: 1_000, scaleChunks: 4, historyTurns: 2, historyTurn: 10 * time.Millisecond}
}

// benchRow is one line of the table: per repetition, the figure and its
// reference measured in the same run.
type benchRow struct {
	name      string
	unit      string
	figure    []float64
	refName   string
	reference []float64
	// ratio is figure/reference per repetition, unless given.
	ratio  []float64
	target string
	// guard, when set, is a regression guard on the row's median ratio:
	// make bench fails when it returns an error.
	guard func(ratio float64) error
}

// guardBelow returns a guard that fails when a ratio falls more than slack
// (a fraction) below committed, and the target text that says so.
func guardBelow(committed, slack float64) (func(float64) error, string) {
	floor := committed * (1 - slack)
	return func(ratio float64) error {
		if ratio < floor {
			return fmt.Errorf("ratio %s is more than %.0f %% below the committed %s", fmtNum(ratio), slack*100, fmtNum(committed))
		}
		return nil
	}, fmt.Sprintf("guard ≥ %s (committed %s − %.0f %%)", fmtNum(floor), fmtNum(committed), slack*100)
}

// guardAbove returns a guard that fails when a ratio rises more than slack
// (a fraction) above committed, and the target text that says so.
func guardAbove(committed, slack float64) (func(float64) error, string) {
	ceiling := committed * (1 + slack)
	return func(ratio float64) error {
		if ratio > ceiling {
			return fmt.Errorf("ratio %s is more than %.0f %% above the committed %s", fmtNum(ratio), slack*100, fmtNum(committed))
		}
		return nil
	}, fmt.Sprintf("guard ≤ %s (committed %s + %.0f %%)", fmtNum(ceiling), fmtNum(committed), slack*100)
}

// guardFailures returns, per row with a guard, why its median ratio fails
// it.
func guardFailures(rows []*benchRow) []string {
	var failed []string
	for _, r := range rows {
		if r.guard == nil || len(r.ratio) == 0 {
			continue
		}
		med, _, _ := medianRange(r.ratio)
		if err := r.guard(med); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", r.name, err))
		}
	}
	return failed
}

func (r *benchRow) add(figure, reference float64) {
	r.figure = append(r.figure, figure)
	r.reference = append(r.reference, reference)
	if reference != 0 {
		r.ratio = append(r.ratio, figure/reference)
	}
}

func medianRange(xs []float64) (med, lo, hi float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}

func fmtNum(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

func fmtStat(xs []float64) string {
	if len(xs) == 0 {
		return "—"
	}
	med, lo, hi := medianRange(xs)
	if len(xs) == 1 {
		return fmtNum(med)
	}
	return fmt.Sprintf("%s (%s–%s)", fmtNum(med), fmtNum(lo), fmtNum(hi))
}

func renderBenchTable(rows []*benchRow) string {
	var b strings.Builder
	b.WriteString("| what | figure | reference, same run | ratio | target |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		ref := "—"
		if r.refName != "" {
			ref = r.refName + ": " + fmtStat(r.reference)
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s | %s | %s |\n", r.name, fmtStat(r.figure), r.unit, ref, fmtStat(r.ratio), r.target)
	}
	return b.String()
}

// TestBenchTable is `make bench` and `make bench-smoke`.
func TestBenchTable(t *testing.T) {
	mode := os.Getenv("BUILDRISK_BENCH")
	if mode != "full" && mode != "smoke" {
		t.Skip("run by make bench (BUILDRISK_BENCH=full) and make bench-smoke (BUILDRISK_BENCH=smoke)")
	}
	only := os.Getenv("BUILDRISK_BENCH_ONLY") // comma list of row groups, for working on one
	want := func(group string) bool {
		return only == "" || slices.Contains(strings.Split(only, ","), group)
	}
	scale := benchScaleFor(mode)
	began := time.Now()
	var rows []*benchRow
	if want("fanout") {
		rows = append(rows, benchFanOut(t, scale)...)
	}
	if want("cpu") {
		rows = append(rows, benchCPUBound(t, scale)...)
	}
	if want("pickup") {
		rows = append(rows, benchPickup(t, scale)...)
	}
	if want("chunk") {
		rows = append(rows, benchChunk(t, scale)...)
	}
	if want("jobs") {
		rows = append(rows, benchJobList(t, scale))
	}
	if want("api") {
		rows = append(rows, benchAPI(t, scale)...)
	}
	if want("history") {
		rows = append(rows, benchHistory(t, scale)...)
	}
	var bin string
	if want("import") || want("memory") || want("drain") || want("stale") {
		bin = buildRadar(t)
	}
	if want("import") {
		rows = append(rows, benchImportMemory(t, scale, bin))
	}
	if want("memory") {
		rows = append(rows, benchWorkerMemory(t, scale, bin))
	}
	if want("drain") {
		rows = append(rows, benchDrain(t, scale, bin))
	}
	if want("stale") {
		rows = append(rows, benchStale(t, scale, bin))
	}
	if want("scale") {
		rows = append(rows, benchScaleOut(t, scale)...)
	}
	if want("replica") {
		rows = append(rows, benchReplica(t, scale)...)
	}
	table := renderBenchTable(rows)
	header := benchHeader(t, scale, only, time.Since(began))
	fmt.Println(header + "\n\n" + table)
	if mode != "full" {
		return // toy sizes: the figures mean nothing, and guard nothing
	}
	// A full run that breaks a regression guard fails, and leaves the
	// committed table as it was.
	if failed := guardFailures(rows); len(failed) > 0 {
		t.Fatalf("regression guards failed:\n%s", strings.Join(failed, "\n"))
	}
	if only == "" {
		require.NoError(t, writeBenchmarks("../../BENCHMARKS.md", header+"\n\n"+table))
	}
}

// benchHeader states the date, the machine and the command (with the
// groups it ran, when only names some).
func benchHeader(t *testing.T, scale benchScale, only string, took time.Duration) string {
	cpu := "unknown CPU"
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(raw)) {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	mem := ""
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(raw), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.1f GiB RAM", float64(kb)/(1<<20))
		}
	}
	load := ""
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = ", load average at the end " + strings.Join(strings.Fields(string(raw))[:3], " ")
	}
	pg := "PostgreSQL"
	s := apptest.New(t, nil)
	var version string
	if err := s.Pool.QueryRow(context.Background(), "SHOW server_version").Scan(&version); err == nil {
		pg = "PostgreSQL " + version
	}
	command := "make bench"
	if scale.mode == "smoke" {
		command = "make bench-smoke"
	}
	if only != "" {
		command = "BUILDRISK_BENCH_ONLY=" + only + " " + command
	}
	return fmt.Sprintf("Run %s (%s mode, %d repetitions per row, %s): `%s`. Machine: %s, %d CPUs%s, %s/%s, %s, "+
		"%s in a private cluster (pglocal), the fake upstream over real HTTP in the test process%s.",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), scale.mode, scale.reps, took.Round(time.Second), command,
		cpu, runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH, runtime.Version(), pg, load)
}

const benchBegin, benchEnd = "<!-- make bench: begin -->", "<!-- make bench: end -->"

// writeBenchmarks replaces the generated part of BENCHMARKS.md.
func writeBenchmarks(path, body string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(raw)
	i, j := strings.Index(s, benchBegin), strings.Index(s, benchEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s … %s markers", path, benchBegin, benchEnd)
	}
	s = s[:i+len(benchBegin)] + "\n" + body + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}

// productionTelemetry replaces the test system's Telemetry (which keeps
// every span in memory for assertions) with what a process without OTLP
// configured runs: spans made and dropped, metrics in a registry.
func productionTelemetry(t *testing.T, s *apptest.System) {
	t.Helper()
	providers, err := observability.NewProviders(context.Background(), observability.Config{Role: "bench", ServiceVersion: version})
	require.NoError(t, err)
	t.Cleanup(func() { _ = providers.Shutdown(context.Background()) })
	instruments, err := observability.NewInstruments(providers.Meter)
	require.NoError(t, err)
	s.Tel = &app.Telemetry{Providers: providers, Instruments: instruments, Logger: s.Tel.Logger}
}

// A regression guard fails a full run on its row's median ratio only when
// it is worse than the committed figure by more than the slack, in the
// row's direction; rows without a guard never fail.
func TestBenchGuards(t *testing.T) {
	t.Parallel()
	below, target := guardBelow(0.667, 0.10)
	require.Equal(t, "guard ≥ 0.600 (committed 0.667 − 10 %)", target)
	above, target := guardAbove(1.40, 0.10)
	require.Equal(t, "guard ≤ 1.54 (committed 1.40 + 10 %)", target)
	rows := []*benchRow{
		{name: "items", ratio: []float64{0.55, 0.61, 0.9}, guard: below}, // median 0.61: kept
		{name: "cpu", ratio: []float64{1.2, 1.5, 1.9}, guard: above},     // median 1.5: kept
		{name: "free", ratio: []float64{0.01}},
	}
	require.Empty(t, guardFailures(rows))
	rows[0].ratio = []float64{0.59, 0.59, 0.9}
	rows[1].ratio = []float64{1.55}
	failed := guardFailures(rows)
	require.Len(t, failed, 2)
	require.Contains(t, failed[0], "items: ratio 0.590 is more than 10 % below the committed 0.667")
	require.Contains(t, failed[1], "cpu: ratio 1.55 is more than 10 % above the committed 1.40")
}
