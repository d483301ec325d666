package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/buildrisk/radar/api"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/jobs/coverage"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/sql/migrations"
	"github.com/buildrisk/radar/upstream"
)

// Config is every environment variable radar reads, read and validated
// in this one place; a bad value fails with a message naming the variable.
type Config struct {
	DatabaseURL string
	HTTPAddr    string
	AdminAddr   string
	Tokens      map[string]api.Role
	TokenNames  map[string]string
	// SessionKey is BUILDRISK_SESSION_KEY (at least 32 characters).
	SessionKey        []byte
	TokensSet         bool
	InsecureNoAuth    bool
	HeartbeatInterval time.Duration
	StaleAfter        time.Duration
	// CoverageMaxAge is how old the coverage counts behind the gauges and
	// GET /v1/coverage may be before they are counted again.
	CoverageMaxAge time.Duration
	// FenceAfter is the fencing threshold (BUILDRISK_FENCE_AFTER, default
	// half of BUILDRISK_STALE_AFTER): a worker or CLI whose last successful
	// heartbeat is older cancels its work in flight uncommitted.
	FenceAfter time.Duration
	// DBTimeout is the statement timeout of the worker's and the CLI's
	// database calls (BUILDRISK_DB_STATEMENT_TIMEOUT, default 5s, at most a
	// quarter of BUILDRISK_STALE_AFTER).
	DBTimeout    time.Duration
	ReapInterval time.Duration
	DrainTimeout time.Duration
	// StopTimeout is how long the calls in flight of a run asked to stop
	// (POST /v1/jobs/{job}/stop) may still take once the run has seen the
	// stop, before they are cancelled uncommitted (BUILDRISK_STOP_TIMEOUT,
	// default BUILDRISK_DRAIN_TIMEOUT): a stop is bounded like a drain.
	StopTimeout time.Duration
	// WorkerRetention is how long the registry keeps a silent worker's row
	// (BUILDRISK_WORKER_RETENTION, default 168h).
	WorkerRetention time.Duration
	FanOut          int
	// WorkerConcurrency is how many requests one worker process runs at
	// once (BUILDRISK_WORKER_CONCURRENCY, an addition to the contract).
	WorkerConcurrency int
	// DBMaxConns is the size of the api's or the worker's main database
	// pool (BUILDRISK_DB_MAX_CONNS); 0 derives it from the concurrency (see
	// APIMaxConns and workerMaxConns).
	DBMaxConns int
	// TxPooling is BUILDRISK_DB_PGBOUNCER=transaction: DATABASE_URL leads
	// to PgBouncer in transaction pooling mode, so the processes keep no
	// state on a server connection beyond one transaction (see
	// txPoolingConfig).
	TxPooling    bool
	UpstreamURLs map[upstream.Provider]string
	// InsecureHTTPUpstream is BUILDRISK_INSECURE_HTTP_UPSTREAM=1: provider
	// URLs may be plain http (a fake upstream); otherwise they must be https.
	InsecureHTTPUpstream bool
	Keys                 map[upstream.Provider]string
	DailyCaps            map[upstream.Provider]int
	// Rates is each provider's fleet-wide rate limit in calls per second
	// (BUILDRISK_RATE_<P>); a provider without one is absent.
	Rates     map[upstream.Provider]float64
	Location  *time.Location
	LogFormat string
	// MaxBodyBytes bounds every API request body (BUILDRISK_MAX_BODY_BYTES).
	MaxBodyBytes int64
	// AllowedHosts are the Host names the api answers for
	// (BUILDRISK_ALLOWED_HOSTS; LoopbackHosts by default with
	// BUILDRISK_INSECURE_NO_AUTH=1, any Host by default otherwise); see
	// api.Config.AllowedHosts. Nil: any Host.
	AllowedHosts []string
	// TrustedProxies are the proxies whose X-Forwarded-For the api believes
	// (BUILDRISK_TRUSTED_PROXIES: addresses and CIDR prefixes, separated by
	// commas); see api.Config.TrustedProxies.
	TrustedProxies []netip.Prefix
	// IdempotencyRetention is how long the api keeps an Idempotency-Key's
	// record, a retry within it being answered from the record
	// (BUILDRISK_IDEMPOTENCY_RETENTION, default 24h, at most
	// IdempotencyRetentionMax).
	IdempotencyRetention time.Duration
	// APIStatementTimeout and APILockTimeout are the statement_timeout and
	// lock_timeout of the api's database connections
	// (BUILDRISK_API_STATEMENT_TIMEOUT, BUILDRISK_API_LOCK_TIMEOUT).
	APIStatementTimeout time.Duration
	APILockTimeout      time.Duration
	// MigrateLockTimeout is the lock_timeout of the sessions that apply
	// migrations (BUILDRISK_MIGRATE_LOCK_TIMEOUT), MigrateLockRetryFor how
	// long migrating retries after lock timeouts before it gives up
	// (BUILDRISK_MIGRATE_LOCK_RETRY_FOR); see migrations.Config.
	MigrateLockTimeout  time.Duration
	MigrateLockRetryFor time.Duration
	// Schedules are the periodic requests (catalog default, or
	// BUILDRISK_SCHEDULE_<JOB>), parsed, with their catch-up windows
	// (BUILDRISK_SCHEDULE_CATCHUP_<JOB>, default one period); jobs whose
	// schedule is off are absent.
	Schedules []worker.Schedule
	// RuleThresholds are the rules' thresholds: the catalog's defaults, or
	// BUILDRISK_RULE_<NAME>.
	RuleThresholds riskrule.Thresholds
	// AutoResume is the policy for runs stopped by infrastructure
	// (BUILDRISK_AUTO_RESUME, BUILDRISK_AUTO_RESUME_MAX,
	// BUILDRISK_AUTO_RESUME_BACKOFF).
	AutoResume request.ResumePolicy
	// Now is the clock of call budgets and schedules; nil is time.Now. Not
	// an environment variable: tests set it to cross a day boundary and to
	// make due times come without waiting for them.
	Now func() time.Time
	// ProviderTimeout bounds one provider HTTP attempt; 0 is the upstream
	// default. Not an environment variable: tests shorten it to time out.
	ProviderTimeout time.Duration
}

// Defaults and bounds of the api's database timeouts. The statement timeout
// stays well under the HTTP write timeout, so a slow call still gets its 503.
const (
	APIStatementTimeoutDefault = 5 * time.Second
	APILockTimeoutDefault      = 2 * time.Second
	APIStatementTimeoutMax     = 25 * time.Second
)

// IdempotencyRetentionMax bounds BUILDRISK_IDEMPOTENCY_RETENTION: a key's
// record is a row per POST, kept that long.
const IdempotencyRetentionMax = 30 * 24 * time.Hour

// MigrateLockTimeoutMax bounds BUILDRISK_MIGRATE_LOCK_TIMEOUT: every
// statement on a table a migration waits for queues behind it that long.
const MigrateLockTimeoutMax = time.Minute

// roleNamePattern is what BUILDRISK_DB_APP_ROLE and BUILDRISK_DB_API_ROLE may be: a plain
// PostgreSQL identifier, safe to put in the migration's SQL.
var roleNamePattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// UsageError marks errors that are the user's (exit code 2).
type UsageError struct{ error }

// Usage marks err as the user's.
func Usage(err error) error { return UsageError{err} }

// IsUsage tells whether err, or an error it wraps, is the user's.
func IsUsage(err error) bool {
	var u UsageError
	return errors.As(err, &u)
}

func envError(name string, format string, args ...any) error {
	return UsageError{fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...))}
}

// LoadEnv reads the configuration from getenv (os.Getenv in production)
// and validates every value; an error names the variable and is a usage
// error.
func LoadEnv(getenv func(string) string) (*Config, error) {
	c := &Config{
		DatabaseURL:  getenv("DATABASE_URL"),
		HTTPAddr:     orDefault(getenv("BUILDRISK_HTTP_ADDR"), ":8080"),
		AdminAddr:    orDefault(getenv("BUILDRISK_ADMIN_ADDR"), ":9090"),
		UpstreamURLs: map[upstream.Provider]string{},
		Keys:         map[upstream.Provider]string{},
		DailyCaps:    map[upstream.Provider]int{},
		Rates:        map[upstream.Provider]float64{},
		LogFormat:    getenv("BUILDRISK_LOG_FORMAT"),
	}
	var err error
	tokens, tokensFile := getenv("BUILDRISK_API_TOKENS"), getenv("BUILDRISK_API_TOKENS_FILE")
	switch {
	case tokens != "" && tokensFile != "":
		return nil, envError("BUILDRISK_API_TOKENS_FILE", "set either it or BUILDRISK_API_TOKENS, not both")
	case tokensFile != "":
		raw, err := os.ReadFile(tokensFile)
		if err != nil {
			return nil, envError("BUILDRISK_API_TOKENS_FILE", "%v", err)
		}
		if c.Tokens, c.TokenNames, err = api.ParseTokens(string(raw)); err != nil {
			return nil, envError("BUILDRISK_API_TOKENS_FILE", "%s: %v (expected role:name:TOKEN or role:TOKEN entries, one a line)", tokensFile, err)
		}
		c.TokensSet = true
	case tokens != "":
		if c.Tokens, c.TokenNames, err = api.ParseTokens(tokens); err != nil {
			return nil, envError("BUILDRISK_API_TOKENS", "%v (expected role:name:TOKEN or role:TOKEN entries, e.g. operator:alice:TOKEN,viewer:TOKEN)", err)
		}
		c.TokensSet = true
	}
	if v := getenv("BUILDRISK_SESSION_KEY"); v != "" {
		// new,old while rotating: each key at least TokenMinLength.
		for i, k := range strings.Split(v, ",") {
			if k = strings.TrimSpace(k); len(k) < api.TokenMinLength {
				return nil, envError("BUILDRISK_SESSION_KEY", "key %d is %d characters; each must be at least %d (`openssl rand -hex 32`)", i+1, len(k), api.TokenMinLength)
			}
		}
		c.SessionKey = []byte(v)
	}
	switch v := getenv("BUILDRISK_INSECURE_NO_AUTH"); v {
	case "", "0", "false":
	case "1", "true":
		c.InsecureNoAuth = true
	default:
		return nil, envError("BUILDRISK_INSECURE_NO_AUTH", "%q is not 1 or 0", v)
	}
	durations := []struct {
		name string
		dst  *time.Duration
		def  time.Duration
	}{
		{"BUILDRISK_HEARTBEAT_INTERVAL", &c.HeartbeatInterval, worker.HeartbeatIntervalDefault},
		{"BUILDRISK_STALE_AFTER", &c.StaleAfter, worker.StaleAfterDefault},
		{"BUILDRISK_REAP_INTERVAL", &c.ReapInterval, worker.ReapIntervalDefault},
		{"BUILDRISK_DRAIN_TIMEOUT", &c.DrainTimeout, worker.DrainTimeoutDefault},
		{"BUILDRISK_AUTO_RESUME_BACKOFF", &c.AutoResume.Backoff, request.AutoResumeBackoffDefault},
		{"BUILDRISK_API_STATEMENT_TIMEOUT", &c.APIStatementTimeout, APIStatementTimeoutDefault},
		{"BUILDRISK_API_LOCK_TIMEOUT", &c.APILockTimeout, APILockTimeoutDefault},
		{"BUILDRISK_MIGRATE_LOCK_TIMEOUT", &c.MigrateLockTimeout, migrations.LockTimeoutDefault},
		{"BUILDRISK_MIGRATE_LOCK_RETRY_FOR", &c.MigrateLockRetryFor, migrations.LockRetryForDefault},
		{"BUILDRISK_WORKER_RETENTION", &c.WorkerRetention, worker.RetentionDefault},
		{"BUILDRISK_COVERAGE_MAX_AGE", &c.CoverageMaxAge, coverage.MaxAgeDefault},
		{"BUILDRISK_IDEMPOTENCY_RETENTION", &c.IdempotencyRetention, api.IdempotencyRetentionDefault},
	}
	for _, d := range durations {
		*d.dst = d.def
		if v := getenv(d.name); v != "" {
			parsed, err := time.ParseDuration(v)
			if err != nil || parsed <= 0 {
				return nil, envError(d.name, "%q is not a positive Go duration such as 10s", v)
			}
			*d.dst = parsed
		}
	}
	// A stop is bounded like a drain: by default by the same timeout.
	c.StopTimeout = c.DrainTimeout
	if v := getenv("BUILDRISK_STOP_TIMEOUT"); v != "" {
		parsed, err := time.ParseDuration(v)
		if err != nil || parsed <= 0 {
			return nil, envError("BUILDRISK_STOP_TIMEOUT", "%q is not a positive Go duration such as 10s", v)
		}
		c.StopTimeout = parsed
	}
	if c.IdempotencyRetention > IdempotencyRetentionMax {
		return nil, envError("BUILDRISK_IDEMPOTENCY_RETENTION", "%s is more than %s", c.IdempotencyRetention, IdempotencyRetentionMax)
	}
	if c.APIStatementTimeout < 100*time.Millisecond || c.APIStatementTimeout > APIStatementTimeoutMax {
		return nil, envError("BUILDRISK_API_STATEMENT_TIMEOUT", "%s is not from 100ms to %s", c.APIStatementTimeout, APIStatementTimeoutMax)
	}
	if c.APILockTimeout < 10*time.Millisecond || c.APILockTimeout > c.APIStatementTimeout {
		return nil, envError("BUILDRISK_API_LOCK_TIMEOUT", "%s is not from 10ms to BUILDRISK_API_STATEMENT_TIMEOUT (%s)", c.APILockTimeout, c.APIStatementTimeout)
	}
	// A migration's lock_timeout is what the fleet may wait behind it: a few
	// seconds, and never more than the window of its retries.
	if c.MigrateLockTimeout < 10*time.Millisecond || c.MigrateLockTimeout > MigrateLockTimeoutMax {
		return nil, envError("BUILDRISK_MIGRATE_LOCK_TIMEOUT", "%s is not from 10ms to %s", c.MigrateLockTimeout, MigrateLockTimeoutMax)
	}
	if c.MigrateLockRetryFor < c.MigrateLockTimeout {
		return nil, envError("BUILDRISK_MIGRATE_LOCK_RETRY_FOR", "%s is less than BUILDRISK_MIGRATE_LOCK_TIMEOUT (%s)", c.MigrateLockRetryFor, c.MigrateLockTimeout)
	}
	if c.StaleAfter <= c.HeartbeatInterval {
		return nil, envError("BUILDRISK_STALE_AFTER", "%s must exceed BUILDRISK_HEARTBEAT_INTERVAL %s", c.StaleAfter, c.HeartbeatInterval)
	}
	// BUILDRISK_FENCE_AFTER and BUILDRISK_DB_STATEMENT_TIMEOUT default to
	// values derived from the stale window and the heartbeat interval (and
	// from each other when one is set), chosen so that the inequality
	// checked below holds: only values the operator set can break it.
	var fenceSet, dbSet bool
	for _, d := range []struct {
		name string
		dst  *time.Duration
		set  *bool
	}{
		{"BUILDRISK_FENCE_AFTER", &c.FenceAfter, &fenceSet},
		{"BUILDRISK_DB_STATEMENT_TIMEOUT", &c.DBTimeout, &dbSet},
	} {
		if v := getenv(d.name); v != "" {
			parsed, err := time.ParseDuration(v)
			if err != nil || parsed <= 0 {
				return nil, envError(d.name, "%q is not a positive Go duration such as 10s", v)
			}
			*d.dst, *d.set = parsed, true
		}
	}
	if !dbSet {
		c.DBTimeout = worker.DBTimeoutFor(c.StaleAfter, c.HeartbeatInterval)
		if room := c.StaleAfter - c.HeartbeatInterval - c.FenceAfter; fenceSet && room > 0 && c.DBTimeout >= room {
			c.DBTimeout = max((room * 3 / 4).Truncate(time.Millisecond), time.Millisecond)
		}
	}
	if !fenceSet {
		c.FenceAfter = worker.FenceAfterFor(c.StaleAfter, c.HeartbeatInterval, c.DBTimeout)
	}
	if err := worker.CheckFencing(c.FenceAfter, c.HeartbeatInterval, c.DBTimeout, c.StaleAfter); err != nil {
		return nil, UsageError{fmt.Errorf("BUILDRISK_FENCE_AFTER (%s) + BUILDRISK_HEARTBEAT_INTERVAL (%s) + BUILDRISK_DB_STATEMENT_TIMEOUT (%s) must be less than BUILDRISK_STALE_AFTER (%s): "+
			"a worker cut off from the database must stop its work before another one can take it over; lower the first three or raise BUILDRISK_STALE_AFTER",
			c.FenceAfter, c.HeartbeatInterval, c.DBTimeout, c.StaleAfter)}
	}
	if c.WorkerRetention <= c.StaleAfter {
		return nil, envError("BUILDRISK_WORKER_RETENTION", "%s must exceed BUILDRISK_STALE_AFTER %s", c.WorkerRetention, c.StaleAfter)
	}
	c.WorkerConcurrency = worker.MaxConcurrentJobsDefault
	if v := getenv("BUILDRISK_WORKER_CONCURRENCY"); v != "" {
		if c.WorkerConcurrency, err = strconv.Atoi(v); err != nil || c.WorkerConcurrency < 1 || c.WorkerConcurrency > 1000 {
			return nil, envError("BUILDRISK_WORKER_CONCURRENCY", "%q is not an integer from 1 to 1000", v)
		}
	}
	if v := getenv("BUILDRISK_DB_MAX_CONNS"); v != "" {
		if c.DBMaxConns, err = strconv.Atoi(v); err != nil || c.DBMaxConns < 1 || c.DBMaxConns > 10000 {
			return nil, envError("BUILDRISK_DB_MAX_CONNS", "%q is not an integer from 1 to 10000", v)
		}
	}
	switch v := getenv("BUILDRISK_DB_PGBOUNCER"); v {
	case "", "off":
	case "transaction":
		c.TxPooling = true
	default:
		return nil, envError("BUILDRISK_DB_PGBOUNCER", "%q is not transaction or off", v)
	}
	c.FanOut = batch.FanOutDefault
	if v := getenv("BUILDRISK_FANOUT"); v != "" {
		if c.FanOut, err = strconv.Atoi(v); err != nil || c.FanOut < 1 || c.FanOut > 1000 {
			return nil, envError("BUILDRISK_FANOUT", "%q is not an integer from 1 to 1000", v)
		}
	}
	switch v := getenv("BUILDRISK_INSECURE_HTTP_UPSTREAM"); v {
	case "", "0", "false":
	case "1", "true":
		c.InsecureHTTPUpstream = true
	default:
		return nil, envError("BUILDRISK_INSECURE_HTTP_UPSTREAM", "%q is not 1 or 0", v)
	}
	base := strings.TrimRight(getenv("BUILDRISK_UPSTREAM_URL"), "/")
	for _, p := range upstream.Providers {
		url := base
		if v := getenv("BUILDRISK_" + string(p) + "_URL"); v != "" {
			url = strings.TrimRight(v, "/")
		}
		if url != "" {
			if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
				return nil, envError("BUILDRISK_"+string(p)+"_URL", "%q is not an http(s) URL", url)
			}
			if strings.HasPrefix(url, "http://") && !c.InsecureHTTPUpstream {
				return nil, envError("BUILDRISK_"+string(p)+"_URL", "%q is plain http: provider keys go only over https (set BUILDRISK_INSECURE_HTTP_UPSTREAM=1 for a fake upstream)", url)
			}
			c.UpstreamURLs[p] = url
		}
		if v := getenv(p.KeyEnv()); v != "" {
			c.Keys[p] = v
		}
		c.DailyCaps[p] = upstream.DailyCapDefaults[p]
		name := "BUILDRISK_DAILY_CAP_" + string(p)
		if v := getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, envError(name, "%q is not a non-negative integer", v)
			}
			c.DailyCaps[p] = n
		}
		name = "BUILDRISK_RATE_" + string(p)
		if v := getenv(name); v != "" {
			rate, err := strconv.ParseFloat(v, 64)
			if err != nil || !(rate > 0) || math.IsInf(rate, 1) {
				return nil, envError(name, "%q is not a positive number of calls per second", v)
			}
			c.Rates[p] = rate
		}
	}
	tz := orDefault(getenv("BUILDRISK_TIMEZONE"), "Asia/Seoul")
	if c.Location, err = time.LoadLocation(tz); err != nil {
		return nil, envError("BUILDRISK_TIMEZONE", "%q is not an IANA time zone", tz)
	}
	for _, def := range jobset.Catalog().All() {
		name := "BUILDRISK_SCHEDULE_" + strings.ToUpper(def.Name())
		spec := def.Schedule()
		if v := strings.TrimSpace(getenv(name)); v != "" {
			spec = v
		}
		// The catch-up window is read (and a bad one refused) even while the
		// schedule is off, so turning a schedule on never reveals an old typo.
		var catchUp time.Duration
		catchUpName := "BUILDRISK_SCHEDULE_CATCHUP_" + strings.ToUpper(def.Name())
		if v := strings.TrimSpace(getenv(catchUpName)); v != "" {
			if catchUp, err = time.ParseDuration(v); err != nil || catchUp <= 0 {
				return nil, envError(catchUpName, "%q is not a positive Go duration such as 36h", v)
			}
		}
		if spec == "" || spec == worker.ScheduleOff {
			continue
		}
		next, err := worker.ParseSchedule(spec, c.Location)
		if err != nil {
			return nil, envError(name, "%v (a cron expression, @every DURATION, or off)", err)
		}
		loc := c.Location
		sched := worker.Schedule{
			Job: def.Name(), Spec: spec, Next: next, Period: worker.SchedulePeriod(next, time.Now()),
			// The due time's own day in the configured zone, whenever the
			// request is inserted.
			Params: func(due time.Time) []byte { return def.ScheduledParams(due.In(loc)) },
		}
		sched.CatchUp = catchUp
		c.Schedules = append(c.Schedules, sched)
	}
	c.RuleThresholds = riskrule.ThresholdDefaults()
	for _, r := range riskrule.Set {
		name := riskrule.Env(r.Name)
		if v := strings.TrimSpace(getenv(name)); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				err = riskrule.ValidateThreshold(r, f)
			}
			if err != nil {
				return nil, envError(name, "%q: %v", v, err)
			}
			c.RuleThresholds[r.Name] = f
		}
	}
	if c.AutoResume.Causes, err = request.ParseResumeCauses(orDefault(getenv("BUILDRISK_AUTO_RESUME"), request.AutoResumeCausesDefault)); err != nil {
		return nil, envError("BUILDRISK_AUTO_RESUME", "%v", err)
	}
	c.AutoResume.MaxPerDay = request.AutoResumeMaxDefault
	if v := getenv("BUILDRISK_AUTO_RESUME_MAX"); v != "" {
		if c.AutoResume.MaxPerDay, err = strconv.Atoi(v); err != nil || c.AutoResume.MaxPerDay < 0 || c.AutoResume.MaxPerDay > 100 {
			return nil, envError("BUILDRISK_AUTO_RESUME_MAX", "%q is not an integer from 0 to 100", v)
		}
	}
	c.AutoResume.Location = c.Location
	// Read by the least-privilege migration itself (goose ENVSUB); checked
	// here so that a bad name stops `radar migrate` with a clear message.
	for _, name := range []string{"BUILDRISK_DB_APP_ROLE", "BUILDRISK_DB_API_ROLE"} {
		if v := getenv(name); v != "" && !roleNamePattern.MatchString(v) {
			return nil, envError(name, "%q is not a role name (lower-case letters, digits and _, at most 63)", v)
		}
	}
	c.MaxBodyBytes = api.MaxBodyBytesDefault
	if v := getenv("BUILDRISK_MAX_BODY_BYTES"); v != "" {
		if c.MaxBodyBytes, err = strconv.ParseInt(v, 10, 64); err != nil || c.MaxBodyBytes < 1024 || c.MaxBodyBytes > 1<<30 {
			return nil, envError("BUILDRISK_MAX_BODY_BYTES", "%q is not an integer from 1024 to 1073741824", v)
		}
	}
	if c.AllowedHosts, err = parseAllowedHosts(getenv("BUILDRISK_ALLOWED_HOSTS"), c.InsecureNoAuth); err != nil {
		return nil, envError("BUILDRISK_ALLOWED_HOSTS", "%v", err)
	}
	if c.TrustedProxies, err = parseTrustedProxies(getenv("BUILDRISK_TRUSTED_PROXIES")); err != nil {
		return nil, envError("BUILDRISK_TRUSTED_PROXIES", "%v", err)
	}
	switch c.LogFormat {
	case "", "json", "text":
	default:
		return nil, envError("BUILDRISK_LOG_FORMAT", "%q is not json or text", c.LogFormat)
	}
	return c, nil
}

// LoopbackHosts are the Host names the api answers for without
// authentication unless BUILDRISK_ALLOWED_HOSTS says otherwise: a browser on
// the machine itself, never a name an attacker's DNS can point at it.
var LoopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// hostNamePattern is a DNS name as BUILDRISK_ALLOWED_HOSTS takes it
// (normalized: lower-case, no trailing dot).
var hostNamePattern = regexp.MustCompile(`^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*$`)

// parseAllowedHosts parses BUILDRISK_ALLOWED_HOSTS: host names and IP
// addresses separated by commas or spaces, without ports, or * for any
// Host. Unset, it is LoopbackHosts when authentication is off and any Host
// otherwise (nil).
func parseAllowedHosts(v string, insecure bool) ([]string, error) {
	entries := strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
	switch {
	case len(entries) == 0 && insecure:
		return LoopbackHosts, nil
	case len(entries) == 0:
		return nil, nil
	case len(entries) == 1 && entries[0] == "*":
		return nil, nil
	}
	out := make([]string, 0, len(entries))
	for _, entry := range entries {
		host := api.NormalizeHost(entry)
		_, _, portErr := net.SplitHostPort(entry)
		if _, err := netip.ParseAddr(host); portErr == nil || (err != nil && !hostNamePattern.MatchString(host)) {
			return nil, fmt.Errorf("%q is not a host name or an IP address without a port (or * alone, for any Host)", entry)
		}
		out = append(out, host)
	}
	return out, nil
}

// parseTrustedProxies parses BUILDRISK_TRUSTED_PROXIES: IP addresses and
// CIDR prefixes separated by commas or spaces. A prefix of every address
// is refused: any client could then name its own address.
func parseTrustedProxies(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, entry := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		prefix, err := netip.ParsePrefix(entry)
		if err != nil {
			addr, addrErr := netip.ParseAddr(entry)
			if addrErr != nil || addr.Zone() != "" {
				return nil, fmt.Errorf("%q is not an IP address or a CIDR prefix such as 10.0.0.0/8", entry)
			}
			addr = addr.Unmap()
			prefix = netip.PrefixFrom(addr, addr.BitLen())
		}
		if prefix.Bits() == 0 {
			return nil, fmt.Errorf("%q trusts every address, so any client could name its own; list the proxies", entry)
		}
		out = append(out, prefix.Masked())
	}
	return out, nil
}

// Connection budgets. A worker holds a main pool of workerMaxConns
// connections and a heartbeat pool of HeartbeatPoolConns; an api holds one
// pool of apiMaxConns. With N workers and M apis, PostgreSQL's
// max_connections must be at least
//
//	N × (workerMaxConns + HeartbeatPoolConns) + M × apiMaxConns
//	  + superuser_reserved_connections + the migrate job and operators
//
// (README "Connection budgets" has the worked numbers).
const (
	// HeartbeatPoolConns is the worker's separate pool for its registry
	// row: a heartbeat never waits behind chunk work for a connection.
	HeartbeatPoolConns = 2
	// WorkerConnsPerJob: a running job holds one connection for its chunk
	// work (a fan-out chunk two for a moment, while two parts commit side by
	// side), and its call leases take one more now and then; each only for
	// a round trip, so a moment's third waits briefly for the pool.
	WorkerConnsPerJob = 2
	// WorkerConnsBase: River (its LISTEN connection, producer fetches,
	// completer, leader election and maintenance) and the worker's own loops
	// (reaper, reconcile, gauges).
	WorkerConnsBase = 6
	// APIConnsPerCPU: API handlers hold a connection only for their short
	// queries, so a few per CPU keep every handler goroutine busy.
	APIConnsPerCPU = 4
	APIConnsMin    = 8
)

// WorkerMaxConns is the worker's main pool size: BUILDRISK_DB_MAX_CONNS, or
// two connections per concurrent job plus River's and the loops'.
func (c *Config) WorkerMaxConns() int32 {
	if c.DBMaxConns > 0 {
		return int32(c.DBMaxConns)
	}
	return int32(WorkerConnsPerJob*c.WorkerConcurrency + WorkerConnsBase)
}

// APIMaxConns is the api's pool size: BUILDRISK_DB_MAX_CONNS, or a few
// connections per CPU the process may use.
func (c *Config) APIMaxConns() int32 {
	if c.DBMaxConns > 0 {
		return int32(c.DBMaxConns)
	}
	return int32(max(APIConnsMin, APIConnsPerCPU*runtime.GOMAXPROCS(0)))
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// TimeNow reads the configured clock (Now, or time.Now).
func (c *Config) TimeNow() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// ConfiguredKeyNames returns the NAMES of the provider keys set; never values.
func (c *Config) ConfiguredKeyNames() []string {
	var names []string
	for _, p := range upstream.Providers {
		if c.Keys[p] != "" {
			names = append(names, p.KeyEnv())
		}
	}
	return names
}

func (c *Config) CapsByName() map[string]int {
	caps := map[string]int{}
	for p, v := range c.DailyCaps {
		caps[string(p)] = v
	}
	return caps
}

// RequireDatabaseURL refuses a configuration without DATABASE_URL.
func RequireDatabaseURL(c *Config) error {
	if c.DatabaseURL == "" {
		return UsageError{errors.New("DATABASE_URL is not set: point it at PostgreSQL (postgres://user@host:5432/db), or use `radar dev`, which starts an embedded one")}
	}
	return nil
}

// RefuseTxPoolingMigrations stops a command that migrates when
// BUILDRISK_DB_PGBOUNCER=transaction: goose holds a session-level advisory
// lock for the whole migration (so that concurrent migrators wait), and
// under PgBouncer's transaction pooling the lock and its unlock land on
// different server connections, leaving the lock held for whichever client
// gets that connection next. Migrations connect to PostgreSQL directly.
func RefuseTxPoolingMigrations(env *Config, command string) error {
	if !env.TxPooling {
		return nil
	}
	return UsageError{fmt.Errorf("BUILDRISK_DB_PGBOUNCER=transaction: %s applies migrations under a session-level advisory lock, "+
		"which PgBouncer's transaction pooling cannot keep; run it with DATABASE_URL pointing at PostgreSQL itself and BUILDRISK_DB_PGBOUNCER unset "+
		"(docs/operations.md, \"PgBouncer\")", command)}
}
