package main

import (
	"strings"
	"sync"
	"time"
)

// Evidence is what the harness saw for itself during a soak, next to what
// the database holds: the processes it ran and killed, every API answer, and
// every provider call that passed its recording proxy. The invariant checks
// read it together with the database.
type Evidence struct {
	mu sync.Mutex

	// Workers are every worker process the harness started, in start order.
	Workers []*ProcessRecord

	// Answers are the API's answers to the load's requests.
	Answers []Answer

	// Calls are the provider calls the proxy forwarded.
	Calls []UpstreamCall

	// FakeTotal is the fake upstream's own call count (GET /__fake/stats),
	// read after quiescence; -1 when it could not be read.
	FakeTotal int64

	// APIMetrics is the api's /metrics after quiescence.
	APIMetrics Metrics

	// WorkerMetrics is each worker's /metrics after quiescence, by
	// application name; only workers alive then.
	WorkerMetrics map[string]Metrics

	// APITimeout is the load's client timeout: an API call without an answer
	// by then counts as hung.
	APITimeout time.Duration

	// Outages are the database outages the harness caused; StaleAfter is the
	// fleet's stale window. During an outage longer than the window no
	// worker can heartbeat, so every worker is dead as far as the system can
	// know (each fences itself), and a reap right after it is the design,
	// not a false one.
	Outages    []Outage
	StaleAfter time.Duration

	// Faults are the injections that took effect, in the order they ended.
	Faults []FaultEvent

	// FanOut is the fleet's BUILDRISK_FANOUT: the documented bound on the
	// paid calls one fault may make a run repeat is 2 × FanOut.
	FanOut int

	// StopTimeout is the fleet's BUILDRISK_STOP_TIMEOUT: how long a stopped
	// run's calls in flight may take before they are abandoned.
	StopTimeout time.Duration

	// Stops are the operator stops the faults made (a 202 to POST
	// /v1/jobs/{job}/stop), each with the execution it stopped.
	Stops []StopEvent

	// Replication is the database's replication mode (-replication: none,
	// async or sync); Failovers are the failovers the soak made.
	Replication string
	Failovers   []FailoverEvent
	// SplitBrains are the windows in which a demoted primary answered
	// read-write beside the promoted one, with the rows written on it.
	SplitBrains []SplitBrainEvent

	// APIStarted is when the api process started (its failover counter
	// starts with it).
	APIStarted time.Time
}

// StopEvent is one operator stop the soak made: when the api accepted it,
// the execution it marked STOPPING, and the fault that made it.
type StopEvent struct {
	At          time.Time
	Job         string
	ExecutionID int64
	Fault       string
	Stream      int
}

// addStop records an operator stop the api accepted.
func (e *Evidence) addStop(s StopEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.Stops = append(e.Stops, s)
}

// stops returns a copy of the stops recorded so far.
func (e *Evidence) stops() []StopEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]StopEvent(nil), e.Stops...)
}

// FailoverEvent is one failover: the primary killed at Start, the standby
// promoted (accepting writes) at Promoted.
type FailoverEvent struct {
	Start, Promoted time.Time
}

// SplitBrainEvent is one window in which the old primary answered
// read-write beside the promoted one: the rows written on it meanwhile
// (Err: why they could not be counted).
type SplitBrainEvent struct {
	Start, End time.Time
	Rows       int
	Err        string
}

// addSplitBrain records a split brain the soak made.
func (e *Evidence) addSplitBrain(sb SplitBrainEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.SplitBrains = append(e.SplitBrains, sb)
}

// addFailover records a failover the soak made.
func (e *Evidence) addFailover(f FailoverEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.Failovers = append(e.Failovers, f)
}

// asyncFailovers reports whether the run failed over to an asynchronous
// standby, which may lose the commits acknowledged last.
func (e *Evidence) asyncFailovers() bool {
	return e.Replication == replicationAsync && len(e.Failovers) > 0
}

// addCutOff records a window in which the process p was cut off.
func (e *Evidence) addCutOff(p *ProcessRecord, o Outage) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p.CutOff = append(p.CutOff, o)
}

// addFault records an injection that took effect.
func (e *Evidence) addFault(f FaultEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.Faults = append(e.Faults, f)
}

// Outage is a window in which PostgreSQL was down.
type Outage struct{ Start, End time.Time }

// addOutage records an outage the harness caused.
func (e *Evidence) addOutage(o Outage) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.Outages = append(e.Outages, o)
}

// cutOffAt reports whether, at t, the workers may have been without a
// heartbeat for longer than the stale window because of an outage: from an
// outage's start until a stale window after it ended (the time the workers
// need to beat again before the reaper next looks).
func (e *Evidence) cutOffAt(t time.Time) bool {
	for _, o := range e.Outages {
		if o.End.Sub(o.Start) >= e.StaleAfter && !t.Before(o.Start) && !t.After(o.End.Add(e.StaleAfter)) {
			return true
		}
	}
	return false
}

// ProcessRecord is one worker process: its identity in the database and when
// it lived.
type ProcessRecord struct {
	// AppName is the application_name its connections carry (PGAPPNAME).
	AppName string
	// PID is its process id.
	PID int
	// WorkerID is the id it registered under (read from its log).
	WorkerID string
	// Started is when it was started; Ended when it was killed or exited
	// (zero while it runs).
	Started, Ended time.Time
	// Killed says it ended by SIGKILL.
	Killed bool
	// CutOff are the windows in which the process, alive, could not reach
	// PostgreSQL or run at all (a partition of its connections, a
	// SIGSTOP): as far as the system can know it was dead, so a reap then
	// is the design.
	CutOff []Outage
}

// cutOffAt reports whether, at t, the process had been cut off longer than
// the stale window allows: from the start of a cut-off at least that long
// until a stale window after it ended (its heartbeat's first chance to
// land again before a reaper looks).
func (p *ProcessRecord) cutOffAt(t time.Time, staleAfter time.Duration) bool {
	for _, o := range p.CutOff {
		if o.End.Sub(o.Start) >= staleAfter && !t.Before(o.Start) && !t.After(o.End.Add(staleAfter)) {
			return true
		}
	}
	return false
}

// aliveAt reports whether the process ran at t.
func (p *ProcessRecord) aliveAt(t time.Time) bool {
	return !t.Before(p.Started) && (p.Ended.IsZero() || t.Before(p.Ended))
}

// RequestKind is what the load meant a request to be.
type RequestKind string

// Kinds of requests the load makes.
const (
	KindValid     RequestKind = "valid"
	KindDuplicate RequestKind = "duplicate"
	KindInvalid   RequestKind = "invalid"
	// KindControl is a call the harness makes for its faults or for
	// observation (stop, job list); it is not part of the request counts.
	KindControl RequestKind = "control"
)

// Answer is one API call and its answer.
type Answer struct {
	At      time.Time
	Kind    RequestKind
	Method  string
	Path    string
	Job     string
	Status  int // 0 when no answer came (Err says why)
	Err     string
	Latency time.Duration
	Body    string // the start of the answer, for the report
	// RequestID is the id a 202 to a request to run a job carries.
	RequestID string
}

// UpstreamCall is one provider call the proxy forwarded.
type UpstreamCall struct {
	At       time.Time
	Endpoint string
	// Params are the call's query parameters, the key removed.
	Params map[string]string
	Status int
	// BodyBroken says the answer's body did not arrive whole (cut short,
	// or abandoned by its caller while it hung).
	BodyBroken bool
}

func (e *Evidence) addAnswer(a Answer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.Answers = append(e.Answers, a)
}

func (e *Evidence) addCall(c UpstreamCall) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.Calls = append(e.Calls, c)
}

func (e *Evidence) addWorker(p *ProcessRecord) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.Workers = append(e.Workers, p)
}

// workerByID returns the process that registered as id.
func (e *Evidence) workerByID(id string) *ProcessRecord {
	for _, p := range e.Workers {
		if p.WorkerID == id {
			return p
		}
	}
	return nil
}

// workerByAppName returns the process whose connections carry name.
func (e *Evidence) workerByAppName(name string) *ProcessRecord {
	for _, p := range e.Workers {
		if p.AppName == name {
			return p
		}
	}
	return nil
}

// Metrics are the samples of one /metrics scrape: metric name → samples.
type Metrics map[string][]Sample

// Sample is one sample of a metric.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Sum adds the samples of name whose labels include every pair of match.
func (m Metrics) Sum(name string, match map[string]string) float64 {
	var total float64
	for _, s := range m[name] {
		ok := true
		for k, v := range match {
			if !strings.EqualFold(s.Labels[k], v) {
				ok = false
				break
			}
		}
		if ok {
			total += s.Value
		}
	}
	return total
}
