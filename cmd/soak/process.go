package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"time"
)

// proc is one radar process the harness started; its output goes to a log
// file in the run directory.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *os.File

	mu      sync.Mutex
	matches map[*regexp.Regexp]chan []string

	exited  chan struct{}
	waitErr error
}

// startProc starts bin with args and env (added to a clean copy of ours)
// and logs its output to dir/name.log. watch are the lines the caller will
// wait for (see waitLine).
func startProc(dir, name, bin string, env map[string]string, watch []*regexp.Regexp, args ...string) (*proc, error) {
	logFile, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("error creating log of %s: %w", name, err)
	}
	p := &proc{name: name, cmd: exec.Command(bin, args...), log: logFile, matches: map[*regexp.Regexp]chan []string{}, exited: make(chan struct{})}
	for _, re := range watch {
		p.matches[re] = make(chan []string, 1)
	}
	p.cmd.Env = cleanEnv()
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	// Its own process group: a Ctrl-C at the terminal reaches the harness,
	// which then shuts every process down in order.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	p.cmd.Stderr = p.cmd.Stdout
	fmt.Fprintf(logFile, "=== %s start %s %v\n", time.Now().Format(time.RFC3339Nano), name, args)
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("error starting %s: %w", name, err)
	}
	go p.pump(out)
	return p, nil
}

// pump copies the output to the log and hands watched lines over.
func (p *proc) pump(out io.Reader) {
	scanner := bufio.NewScanner(out)
	scanner.Buffer(make([]byte, 64<<10), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		fmt.Fprintln(p.log, line)
		p.mu.Lock()
		for re, ch := range p.matches {
			if m := re.FindStringSubmatch(line); m != nil {
				select {
				case ch <- m:
				default:
				}
			}
		}
		p.mu.Unlock()
	}
	p.waitErr = p.cmd.Wait()
	fmt.Fprintf(p.log, "=== %s exit %s: %v\n", time.Now().Format(time.RFC3339Nano), p.name, p.cmd.ProcessState)
	p.log.Close()
	close(p.exited)
}

// waitLine waits for the first line matching re (one of the watched ones).
func (p *proc) waitLine(ctx context.Context, re *regexp.Regexp, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case m := <-p.matches[re]:
		return m, nil
	case <-p.exited:
		return nil, fmt.Errorf("%s exited before printing %s (%v); see %s", p.name, re, p.cmd.ProcessState, p.log.Name())
	case <-ctx.Done():
		return nil, fmt.Errorf("%s did not print %s within %s; see %s", p.name, re, timeout, p.log.Name())
	}
}

// signal sends sig; a process already gone is no error.
func (p *proc) signal(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
}

// wait waits until the process has exited, at most timeout; it reports
// whether it did.
func (p *proc) wait(timeout time.Duration) bool {
	select {
	case <-p.exited:
		return true
	case <-time.After(timeout):
		return false
	}
}

// stop asks the process to end (SIGTERM) and kills it after timeout.
func (p *proc) stop(timeout time.Duration) {
	p.signal(syscall.SIGTERM)
	if !p.wait(timeout) {
		p.signal(syscall.SIGKILL)
		p.wait(timeout)
	}
}

// exitCode is the exit code once exited, -1 before or when killed.
func (p *proc) exitCode() int {
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// cleanEnv is the harness's environment without PostgreSQL client settings
// and radar's own, so nothing outside the run leaks into its processes.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if len(kv) >= 2 && kv[:2] == "PG" || len(kv) >= 10 && kv[:10] == "BUILDRISK_" || len(kv) >= 13 && kv[:13] == "DATABASE_URL=" || len(kv) >= 5 && kv[:5] == "OTEL_" {
			continue
		}
		env = append(env, kv)
	}
	return env
}
