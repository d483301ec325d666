package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/internal/app"
	"github.com/buildrisk/radar/internal/config"
	"github.com/buildrisk/radar/internal/dbpool"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/radartype"
)

// paramFlags collects repeated -p key=value flags.
type paramFlags []string

func (p *paramFlags) String() string     { return strings.Join(*p, ",") }
func (p *paramFlags) Set(v string) error { *p = append(*p, v); return nil }

// runRun runs one job in the foreground under the same rules as a worker:
// recorded as a request (source cli), deduplicated, under the advisory lock,
// resumable, capped; Ctrl-C drains it at a chunk boundary (a second Ctrl-C
// cancels the chunk in flight).
func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	jobCatalog := jobset.Catalog()
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(stderr, "usage: radar run JOB [-p key=value ...] [--params JSON] [--max-calls N] [--confirm-purge]\njobs: %s\n", strings.Join(jobCatalog.Names(), ", "))
		return exitUsage
	}
	jobName := args[0]
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var kv paramFlags
	fs.Var(&kv, "p", "param as key=value (repeatable; lists comma-separated)")
	paramsJSON := fs.String("params", "", "params as a JSON object")
	maxCalls := fs.Int("max-calls", 0, "cap this execution's external calls")
	confirmPurge := fs.Bool("confirm-purge", false, "confirm a purge for this request only")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "radar run: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	def, ok := jobCatalog.Lookup(jobName)
	if !ok {
		fmt.Fprintf(stderr, "radar run: unknown job %q; jobs: %s\n", jobName, strings.Join(jobCatalog.Names(), ", "))
		return exitUsage
	}
	raw, err := buildParams(def, *paramsJSON, kv)
	if err != nil {
		fmt.Fprintf(stderr, "radar run: %v\n", err)
		return exitUsage
	}
	var maxCallsPtr *int
	if *maxCalls != 0 {
		maxCallsPtr = maxCalls
	}

	env, err := config.LoadEnv(os.Getenv)
	if err == nil {
		err = config.RequireDatabaseURL(env)
	}
	if err != nil {
		fmt.Fprintf(stderr, "radar run: %v\n", err)
		return exitUsage
	}
	code, err := runJob(ctx, env, jobName, raw, maxCallsPtr, *confirmPurge, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "radar run: %v\n", err)
	}
	return code
}

func runJob(ctx context.Context, env *config.Config, jobName string, raw []byte, maxCalls *int, confirmPurge bool, stdout io.Writer) (int, error) {
	workerID, hostname, boot := app.NewWorkerID()
	tel, err := app.NewTelemetry(ctx, env, "cli", workerID, "text")
	if err != nil {
		return exitFailed, err
	}
	defer tel.Shutdown()
	pool, err := dbpool.Open(ctx, env.DatabaseURL, 4, env.DBTimeout, env.TxPooling, env.SessionLimits(workerID))
	if err != nil {
		return exitFailed, err
	}
	defer pool.Close()
	if err := dbpool.CheckSchema(ctx, pool); err != nil {
		return exitUsage, err
	}
	// The CLI's heartbeat has a connection of its own, like a worker's.
	heartbeatPool, err := dbpool.OpenHeartbeat(ctx, env.DatabaseURL, 1, env.DBTimeout, env.TxPooling, env.SessionLimits(workerID))
	if err != nil {
		return exitFailed, err
	}
	defer heartbeatPool.Close()
	cli, err := app.NewCLI(pool, heartbeatPool, env, tel, workerID, hostname, boot)
	if err != nil {
		return exitFailed, err
	}
	if err := cli.Start(ctx); err != nil {
		return exitFailed, err
	}
	defer func() { _ = cli.Stop(context.WithoutCancel(ctx)) }()
	res, err := cli.Enqueue(ctx, request.EnqueueParams{
		Job: jobName, Params: raw, MaxCalls: maxCalls, ConfirmPurge: confirmPurge,
		Source: radartype.SourceCLI, RequestedBy: "cli",
	})
	var dup *request.DuplicateError
	switch {
	case errors.As(err, &dup):
		return exitDuplicate, fmt.Errorf("job %s already has an active request %d", jobName, dup.ActiveRequestID)
	case catalog.IsParamError(err):
		return exitUsage, err
	case err != nil:
		return exitFailed, err
	}
	resumes := "a new instance"
	if res.ResumesExecutionID != nil {
		resumes = fmt.Sprintf("resuming execution %d", *res.ResumesExecutionID)
	}
	fmt.Fprintf(stdout, "request %d: %s, %d estimated calls, %s\n", res.Request.ID, jobName, res.EstimatedCalls, resumes)

	runner := cli.Runner()

	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	// Every signal reaches this channel (and main's context): the first one
	// drains, a second one cancels the chunk in flight. A signal that came
	// before the channel existed has already cancelled ctx.
	if ctx.Err() != nil {
		runner.Drain()
	}
	go func() {
		select {
		case <-signals:
		case <-runCtx.Done():
			return
		}
		fmt.Fprintln(stdout, "stopping at the next chunk boundary (Ctrl-C again to cancel the chunk in flight)")
		runner.Drain()
		select {
		case <-signals:
			cancelRun()
		case <-runCtx.Done():
		}
	}()

	runOpts := batch.RunOpts{
		RequestID: res.Request.ID,
		OnChunk: func(done, total int) {
			fmt.Fprintf(stdout, "  chunk %d/%d committed\n", done, total)
		},
	}
	outcome, err := runner.Run(runCtx, runOpts)
	for waited := false; errors.Is(err, batch.ErrExecutionActive) && runCtx.Err() == nil; waited = true {
		// An execution of the job is still ending (STOPPING): wait for it
		// rather than fail; SIGINT/SIGTERM ends the wait.
		if !waited {
			fmt.Fprintf(stdout, "waiting: %v\n", err)
		}
		select {
		case <-runCtx.Done():
		case <-time.After(time.Second):
			outcome, err = runner.Run(runCtx, runOpts)
		}
	}
	if errors.Is(err, batch.ErrOwnershipLost) {
		fmt.Fprintf(stdout, "execution %d: ownership lost (abandoned, or taken over by another run); stopped without writing anything more\n", outcome.ExecutionID)
		return exitFailed, err
	}
	if err != nil {
		return exitFailed, err
	}
	fmt.Fprintf(stdout, "execution %d %s: %s\n", outcome.ExecutionID, outcome.Status, outcome.Message)
	switch outcome.Status {
	case radartype.ExecutionCompleted:
		return exitOK, nil
	case radartype.ExecutionStopped:
		return exitStopped, nil
	default:
		return exitFailed, nil
	}
}

// buildParams merges --params JSON and -p key=value flags into one JSON
// object, typing each value after the job's params struct field.
func buildParams(def catalog.Definition, paramsJSON string, kv []string) ([]byte, error) {
	obj := map[string]any{}
	if paramsJSON != "" {
		if err := json.Unmarshal([]byte(paramsJSON), &obj); err != nil {
			return nil, fmt.Errorf("--params: not a JSON object: %w", err)
		}
	}
	fields := map[string]reflect.Type{}
	t := def.ParamsType()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = f.Type
	}
	for _, pair := range kv {
		key, value, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("-p %q: expected key=value", pair)
		}
		typ, known := fields[key]
		if !known {
			return nil, fmt.Errorf("-p %s: %s has no param %q", key, def.Name(), key)
		}
		v, err := typedValue(typ, value)
		if err != nil {
			return nil, fmt.Errorf("-p %s: %w", key, err)
		}
		obj[key] = v
	}
	return json.Marshal(obj)
}

func typedValue(t reflect.Type, s string) (any, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice:
		var list []any
		for _, part := range strings.Split(s, ",") {
			v, err := typedValue(t.Elem(), strings.TrimSpace(part))
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		return list, nil
	case reflect.Bool:
		return strconv.ParseBool(s)
	case reflect.Int, reflect.Int32, reflect.Int64:
		return strconv.ParseInt(s, 10, 64)
	default:
		return s, nil
	}
}
