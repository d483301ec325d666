package config

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sethvargo/go-envconfig"

	"github.com/buildrisk/radar/api"
	"github.com/buildrisk/radar/catalog/coverage"
	"github.com/buildrisk/radar/internal/jobset"
	"github.com/buildrisk/radar/jobs/riskrule"
	"github.com/buildrisk/radar/queue/batch"
	"github.com/buildrisk/radar/queue/forecast"
	"github.com/buildrisk/radar/queue/request"
	"github.com/buildrisk/radar/queue/worker"
	"github.com/buildrisk/radar/sql/migrations"
	"github.com/buildrisk/radar/upstream"
)

// Config is every environment variable radar reads, read and validated
// in this one place; a bad value fails with a message naming the variable.
// A field tagged env holds that variable, decoded by envconfig (see vars
// and checkValue, which also reads the range and oneof tags).
type Config struct {
	DatabaseURL string `env:"DATABASE_URL"`
	HTTPAddr    string `env:"BUILDRISK_HTTP_ADDR, default=:8080"`
	AdminAddr   string `env:"BUILDRISK_ADMIN_ADDR, default=:9090"`
	Tokens      map[string]api.Role
	TokenNames  map[string]string
	// SessionKey is a key, or new,old while rotating: each of 32 or more.
	SessionKey        []byte `env:"BUILDRISK_SESSION_KEY"`
	TokensSet         bool
	InsecureNoAuth    bool          `env:"BUILDRISK_INSECURE_NO_AUTH"`
	HeartbeatInterval time.Duration `env:"BUILDRISK_HEARTBEAT_INTERVAL"`
	StaleAfter        time.Duration `env:"BUILDRISK_STALE_AFTER"`
	// ForecastInterval is how often a run records the forecast of its end
	// (BUILDRISK_FORECAST_INTERVAL, default batch.ForecastIntervalDefault).
	ForecastInterval time.Duration `env:"BUILDRISK_FORECAST_INTERVAL"`
	// Deadlines are the jobs' deadlines, the times of day by which a run
	// must be DONE (BUILDRISK_DEADLINE_<JOB>=HH:MM in BUILDRISK_TIMEZONE);
	// a job without one is absent.
	Deadlines map[string]forecast.Deadline
	// CoverageMaxAge is how old the coverage counts behind the gauges and
	// GET /v1/coverage may be before they are counted again.
	CoverageMaxAge time.Duration `env:"BUILDRISK_COVERAGE_MAX_AGE"`
	// FenceAfter is the fencing threshold (BUILDRISK_FENCE_AFTER, default
	// half of BUILDRISK_STALE_AFTER): a worker or CLI whose last successful
	// heartbeat is older cancels its work in flight uncommitted.
	FenceAfter time.Duration `env:"BUILDRISK_FENCE_AFTER"`
	// DBTimeout is the statement timeout of the worker's and the CLI's
	// database calls (BUILDRISK_DB_STATEMENT_TIMEOUT, default 5s, at most a
	// quarter of BUILDRISK_STALE_AFTER).
	DBTimeout    time.Duration `env:"BUILDRISK_DB_STATEMENT_TIMEOUT"`
	ReapInterval time.Duration `env:"BUILDRISK_REAP_INTERVAL"`
	DrainTimeout time.Duration `env:"BUILDRISK_DRAIN_TIMEOUT"`
	// StopTimeout is how long the calls in flight of a run asked to stop
	// (POST /v1/jobs/{job}/stop) may still take once the run has seen the
	// stop, before they are cancelled uncommitted (BUILDRISK_STOP_TIMEOUT,
	// default BUILDRISK_DRAIN_TIMEOUT): a stop is bounded like a drain.
	StopTimeout time.Duration `env:"BUILDRISK_STOP_TIMEOUT"`
	// WorkerRetention is how long the registry keeps a silent worker's row.
	WorkerRetention time.Duration `env:"BUILDRISK_WORKER_RETENTION"`
	FanOut          int           `env:"BUILDRISK_FANOUT" range:"1 to 1000"`
	// WorkerConcurrency is how many requests one worker process runs at once.
	WorkerConcurrency int `env:"BUILDRISK_WORKER_CONCURRENCY" range:"1 to 1000"`
	// DBMaxConns is the size of the api's or the worker's main database
	// pool; 0 derives it from the concurrency (APIMaxConns, WorkerMaxConns).
	DBMaxConns int `env:"BUILDRISK_DB_MAX_CONNS" range:"1 to 10000"`
	// TxPooling is BUILDRISK_DB_PGBOUNCER=transaction: DATABASE_URL leads
	// to PgBouncer in transaction pooling mode, so the processes keep no
	// state on a server connection beyond one transaction (see
	// txPoolingConfig).
	TxPooling    bool
	UpstreamURLs map[upstream.Provider]string
	// InsecureHTTPUpstream is BUILDRISK_INSECURE_HTTP_UPSTREAM=1: provider
	// URLs may be plain http (a fake upstream); otherwise they must be https.
	InsecureHTTPUpstream bool `env:"BUILDRISK_INSECURE_HTTP_UPSTREAM"`
	Keys                 map[upstream.Provider]string
	DailyCaps            map[upstream.Provider]int
	// Rates is each provider's fleet-wide rate limit in calls per second
	// (BUILDRISK_RATE_<P>); a provider without one is absent.
	Rates     map[upstream.Provider]float64
	Location  *time.Location
	LogFormat string `env:"BUILDRISK_LOG_FORMAT" oneof:"json text"`
	// MaxBodyBytes bounds every API request body.
	MaxBodyBytes int64 `env:"BUILDRISK_MAX_BODY_BYTES" range:"1024 to 1073741824"`
	// TokenRateLimit is each API token's budget of requests per minute
	// (api.Config.TokenRateLimit); 0 turns the limit off.
	TokenRateLimit int `env:"BUILDRISK_TOKEN_RATE_LIMIT" range:"0 to 1000000"`
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
	// record, a retry within it being answered from the record (at most
	// IdempotencyRetentionMax).
	IdempotencyRetention time.Duration `env:"BUILDRISK_IDEMPOTENCY_RETENTION"`
	// APIStatementTimeout and APILockTimeout are the statement_timeout and
	// lock_timeout of the api's database connections.
	APIStatementTimeout time.Duration `env:"BUILDRISK_API_STATEMENT_TIMEOUT"`
	APILockTimeout      time.Duration `env:"BUILDRISK_API_LOCK_TIMEOUT"`
	// MigrateLockTimeout is the lock_timeout of the sessions that apply
	// migrations, MigrateLockRetryFor how long migrating retries after lock
	// timeouts before it gives up; see migrations.Config.
	MigrateLockTimeout  time.Duration `env:"BUILDRISK_MIGRATE_LOCK_TIMEOUT"`
	MigrateLockRetryFor time.Duration `env:"BUILDRISK_MIGRATE_LOCK_RETRY_FOR"`
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

// vars is what envconfig decodes: the tagged fields of Config, and the
// variables that make a field of Config only once parsed (tokens, a time
// zone, host and proxy lists) or that fill a type of another package. A
// field's value before decoding is its variable's default.
type vars struct {
	*Config
	APITokens         string        `env:"BUILDRISK_API_TOKENS"`
	APITokensFile     string        `env:"BUILDRISK_API_TOKENS_FILE"`
	PgBouncer         string        `env:"BUILDRISK_DB_PGBOUNCER" oneof:"transaction off"`
	UpstreamURL       string        `env:"BUILDRISK_UPSTREAM_URL"`
	Timezone          string        `env:"BUILDRISK_TIMEZONE, default=Asia/Seoul"`
	AutoResumeCauses  string        `env:"BUILDRISK_AUTO_RESUME"`
	AutoResumeMax     int           `env:"BUILDRISK_AUTO_RESUME_MAX" range:"0 to 100"`
	AutoResumeBackoff time.Duration `env:"BUILDRISK_AUTO_RESUME_BACKOFF"`
	DBAppRole         string        `env:"BUILDRISK_DB_APP_ROLE"`
	DBAPIRole         string        `env:"BUILDRISK_DB_API_ROLE"`
	AllowedHostList   string        `env:"BUILDRISK_ALLOWED_HOSTS"`
	TrustedProxyList  string        `env:"BUILDRISK_TRUSTED_PROXIES"`
	TrustedProxyWide  bool          `env:"BUILDRISK_TRUSTED_PROXIES_ALLOW_WIDE"`
}

// LoadEnv reads the configuration from getenv (os.Getenv in production)
// and validates every value; an error names the variable and is a usage
// error. An empty variable counts as unset.
func LoadEnv(getenv func(string) string) (*Config, error) {
	v := &vars{
		Config: &Config{
			HeartbeatInterval: worker.HeartbeatIntervalDefault, StaleAfter: worker.StaleAfterDefault,
			ReapInterval: worker.ReapIntervalDefault, DrainTimeout: worker.DrainTimeoutDefault,
			WorkerRetention: worker.RetentionDefault, WorkerConcurrency: worker.MaxConcurrentJobsDefault,
			APIStatementTimeout: APIStatementTimeoutDefault, APILockTimeout: APILockTimeoutDefault,
			MigrateLockTimeout: migrations.LockTimeoutDefault, MigrateLockRetryFor: migrations.LockRetryForDefault,
			IdempotencyRetention: api.IdempotencyRetentionDefault, MaxBodyBytes: api.MaxBodyBytesDefault,
			TokenRateLimit: api.TokenRateLimitDefault,
			CoverageMaxAge: coverage.MaxAgeDefault, FanOut: batch.FanOutDefault,
			ForecastInterval: batch.ForecastIntervalDefault,
		},
		AutoResumeCauses: request.AutoResumeCausesDefault, AutoResumeMax: request.AutoResumeMaxDefault,
		AutoResumeBackoff: request.AutoResumeBackoffDefault,
	}
	err := envconfig.ProcessWith(context.Background(), &envconfig.Config{
		Target:           v,
		Lookuper:         envconfig.LookuperFunc(lookuper(getenv).lookupVar),
		DefaultOverwrite: true, // a variable set replaces the default set above
		Mutators:         []envconfig.Mutator{checkValue},
	})
	if u := (UsageError{}); errors.As(err, &u) {
		return nil, u // without envconfig's prefix: the Go fields' names
	} else if err != nil {
		return nil, err // a mistake in a tag
	}
	if err := v.parse(getenv); err != nil {
		return nil, err
	}
	v.deriveTimeouts()
	if err := v.validate(); err != nil {
		return nil, err
	}
	return v.Config, nil
}

// lookuper is LoadEnv's getenv as envconfig's Lookuper: empty is unset.
// The names come from the tags (the configuration docs test records them
// as LoadEnv asks for them).
type lookuper func(string) string

func (getenv lookuper) lookupVar(name string) (string, bool) {
	value := getenv(name)
	return value, value != ""
}

// envFields are the fields of vars and Config by the variable they hold.
var envFields = func() map[string]reflect.StructField {
	fields := map[string]reflect.StructField{}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[vars]()) {
		if name, _, _ := strings.Cut(f.Tag.Get("env"), ","); name != "" {
			fields[name] = f
		}
	}
	return fields
}()

// checkValue is the rule of each kind of value, an envconfig mutator that
// runs before a value is decoded so that a refusal names the variable: a
// duration is a positive Go duration, a bool 1 or 0 (or true or false), an
// integer a decimal within its field's range tag, a string one of its
// field's oneof tag if it has one.
var checkValue = envconfig.MutatorFunc(func(_ context.Context, name, _, _, value string) (string, bool, error) {
	f := envFields[name]
	switch bounds, oneOf := f.Tag.Get("range"), strings.Fields(f.Tag.Get("oneof")); {
	case len(oneOf) > 0 && !slices.Contains(oneOf, value):
		return "", true, envError(name, "%q is not %s", value, strings.Join(oneOf, " or "))
	case f.Type == reflect.TypeFor[time.Duration]():
		if d, err := time.ParseDuration(value); err != nil || d <= 0 {
			return "", true, envError(name, "%q is not a positive Go duration such as 10s", value)
		}
	case f.Type.Kind() == reflect.Bool:
		if value != "0" && value != "false" && value != "1" && value != "true" {
			return "", true, envError(name, "%q is not 1 or 0", value)
		}
	case bounds != "":
		var lo, hi int64
		fmt.Sscanf(bounds, "%d to %d", &lo, &hi) // a bad tag refuses every value
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil || n < lo || n > hi {
			return "", true, envError(name, "%q is not an integer from %s", value, bounds)
		}
		return strconv.FormatInt(n, 10), false, nil // envconfig would take 010 for octal
	}
	return value, false, nil
})

// parse makes the fields of Config that its variables give only once
// parsed, and those of the variables named after a list.
func (v *vars) parse(getenv func(string) string) error {
	var err error
	switch {
	case v.APITokens != "" && v.APITokensFile != "":
		return envError("BUILDRISK_API_TOKENS_FILE", "set either it or BUILDRISK_API_TOKENS, not both")
	case v.APITokensFile != "":
		raw, err := os.ReadFile(v.APITokensFile)
		if err != nil {
			return envError("BUILDRISK_API_TOKENS_FILE", "%v", err)
		}
		if v.Tokens, v.TokenNames, err = api.ParseTokens(string(raw)); err != nil {
			return envError("BUILDRISK_API_TOKENS_FILE", "%s: %v (expected role:name:TOKEN or role:TOKEN entries, one a line)", v.APITokensFile, err)
		}
	case v.APITokens != "":
		if v.Tokens, v.TokenNames, err = api.ParseTokens(v.APITokens); err != nil {
			return envError("BUILDRISK_API_TOKENS", "%v (expected role:name:TOKEN or role:TOKEN entries, e.g. operator:alice:TOKEN,viewer:TOKEN)", err)
		}
	}
	v.TokensSet = v.APITokens != "" || v.APITokensFile != ""
	v.TxPooling = v.PgBouncer == "transaction"
	if v.Location, err = time.LoadLocation(v.Timezone); err != nil {
		return envError("BUILDRISK_TIMEZONE", "%q is not an IANA time zone", v.Timezone)
	}
	v.AutoResume = request.ResumePolicy{MaxPerDay: v.AutoResumeMax, Backoff: v.AutoResumeBackoff, Location: v.Location}
	if v.AutoResume.Causes, err = request.ParseResumeCauses(v.AutoResumeCauses); err != nil {
		return envError("BUILDRISK_AUTO_RESUME", "%v", err)
	}
	if v.AllowedHosts, err = parseAllowedHosts(v.AllowedHostList, v.InsecureNoAuth); err != nil {
		return envError("BUILDRISK_ALLOWED_HOSTS", "%v", err)
	}
	if v.TrustedProxies, err = parseTrustedProxies(v.TrustedProxyList, v.TrustedProxyWide); err != nil {
		return envError("BUILDRISK_TRUSTED_PROXIES", "%v", err)
	}
	return v.readNamed(getenv)
}

// readNamed reads the variables named after a provider, a job or a rule:
// their names come from lists that no struct tag can hold.
func (v *vars) readNamed(getenv func(string) string) error {
	c := v.Config
	c.UpstreamURLs, c.Keys = map[upstream.Provider]string{}, map[upstream.Provider]string{}
	c.DailyCaps, c.Rates = map[upstream.Provider]int{}, map[upstream.Provider]float64{}
	for _, p := range upstream.Providers {
		if url := strings.TrimRight(cmp.Or(getenv("BUILDRISK_"+string(p)+"_URL"), v.UpstreamURL), "/"); url != "" {
			c.UpstreamURLs[p] = url
		}
		if key := getenv("BUILDRISK_KEY_" + string(p)); key != "" {
			c.Keys[p] = key
		}
		c.DailyCaps[p] = upstream.DailyCapDefaults[p]
		if s := getenv("BUILDRISK_DAILY_CAP_" + string(p)); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return envError("BUILDRISK_DAILY_CAP_"+string(p), "%q is not a non-negative integer", s)
			}
			c.DailyCaps[p] = n
		}
		if s := getenv("BUILDRISK_RATE_" + string(p)); s != "" {
			rate, err := strconv.ParseFloat(s, 64)
			if err != nil || !(rate > 0) || math.IsInf(rate, 1) {
				return envError("BUILDRISK_RATE_"+string(p), "%q is not a positive number of calls per second", s)
			}
			c.Rates[p] = rate
		}
	}
	c.Deadlines = map[string]forecast.Deadline{}
	for _, def := range jobset.Catalog().All() {
		job := strings.ToUpper(def.Name())
		if s := strings.TrimSpace(getenv("BUILDRISK_DEADLINE_" + job)); s != "" {
			d, err := forecast.ParseDeadline(s, c.Location)
			if err != nil {
				return envError("BUILDRISK_DEADLINE_"+job, "%v in BUILDRISK_TIMEZONE", err)
			}
			c.Deadlines[def.Name()] = d
		}
		spec := cmp.Or(strings.TrimSpace(getenv("BUILDRISK_SCHEDULE_"+job)), def.Schedule())
		// The catch-up window is read (and a bad one refused) even while the
		// schedule is off, so turning a schedule on never reveals an old typo.
		var catchUp time.Duration
		if s := strings.TrimSpace(getenv("BUILDRISK_SCHEDULE_CATCHUP_" + job)); s != "" {
			var err error
			if catchUp, err = time.ParseDuration(s); err != nil || catchUp <= 0 {
				return envError("BUILDRISK_SCHEDULE_CATCHUP_"+job, "%q is not a positive Go duration such as 36h", s)
			}
		}
		if spec == "" || spec == worker.ScheduleOff {
			continue
		}
		next, err := worker.ParseSchedule(spec, c.Location)
		if err != nil {
			return envError("BUILDRISK_SCHEDULE_"+job, "%v (a cron expression, @every DURATION, or off)", err)
		}
		loc := c.Location
		c.Schedules = append(c.Schedules, worker.Schedule{
			Job: def.Name(), Spec: spec, Next: next, Period: worker.SchedulePeriod(next, time.Now()), CatchUp: catchUp,
			// The due time's own day in the configured zone, whenever the
			// request is inserted.
			Params: func(due time.Time) []byte { return def.ScheduledParams(due.In(loc)) },
		})
	}
	c.RuleThresholds = riskrule.ThresholdDefaults()
	for _, r := range riskrule.Set {
		if s := strings.TrimSpace(getenv("BUILDRISK_RULE_" + r.Name)); s != "" {
			f, err := strconv.ParseFloat(s, 64)
			if err == nil {
				err = riskrule.ValidateThreshold(r, f)
			}
			if err != nil {
				return envError(riskrule.Env(r.Name), "%q: %v", s, err)
			}
			c.RuleThresholds[r.Name] = f
		}
	}
	return nil
}

// deriveTimeouts fills the timeouts whose defaults follow other settings
// (zero is unset: a duration set is positive). A stop is bounded like a
// drain. The statement timeout and the fencing threshold follow the stale
// window and the heartbeat interval (and each other when one is set) so
// that the fencing inequality holds: only values set can break it.
func (c *Config) deriveTimeouts() {
	c.StopTimeout = cmp.Or(c.StopTimeout, c.DrainTimeout)
	if c.DBTimeout == 0 {
		c.DBTimeout = worker.DBTimeoutFor(c.StaleAfter, c.HeartbeatInterval)
		if room := c.StaleAfter - c.HeartbeatInterval - c.FenceAfter; c.FenceAfter > 0 && room > 0 && c.DBTimeout >= room {
			c.DBTimeout = max((room * 3 / 4).Truncate(time.Millisecond), time.Millisecond)
		}
	}
	if c.FenceAfter == 0 {
		c.FenceAfter = worker.FenceAfterFor(c.StaleAfter, c.HeartbeatInterval, c.DBTimeout)
	}
}

// validate holds the rules that no value's type tells: bounds, the ones
// between variables, and the few values checked as a whole.
func (v *vars) validate() error {
	c := v.Config
	if len(c.SessionKey) > 0 {
		// new,old while rotating: each key at least TokenMinLength.
		for i, k := range strings.Split(string(c.SessionKey), ",") {
			if k = strings.TrimSpace(k); len(k) < api.TokenMinLength {
				return envError("BUILDRISK_SESSION_KEY", "key %d is %d characters; each must be at least %d (`openssl rand -hex 32`)", i+1, len(k), api.TokenMinLength)
			}
		}
	}
	if c.IdempotencyRetention > IdempotencyRetentionMax {
		return envError("BUILDRISK_IDEMPOTENCY_RETENTION", "%s is more than %s", c.IdempotencyRetention, IdempotencyRetentionMax)
	}
	if c.APIStatementTimeout < 100*time.Millisecond || c.APIStatementTimeout > APIStatementTimeoutMax {
		return envError("BUILDRISK_API_STATEMENT_TIMEOUT", "%s is not from 100ms to %s", c.APIStatementTimeout, APIStatementTimeoutMax)
	}
	if c.APILockTimeout < 10*time.Millisecond || c.APILockTimeout > c.APIStatementTimeout {
		return envError("BUILDRISK_API_LOCK_TIMEOUT", "%s is not from 10ms to BUILDRISK_API_STATEMENT_TIMEOUT (%s)", c.APILockTimeout, c.APIStatementTimeout)
	}
	// A migration's lock_timeout is what the fleet may wait behind it: a few
	// seconds, and never more than the window of its retries.
	if c.MigrateLockTimeout < 10*time.Millisecond || c.MigrateLockTimeout > MigrateLockTimeoutMax {
		return envError("BUILDRISK_MIGRATE_LOCK_TIMEOUT", "%s is not from 10ms to %s", c.MigrateLockTimeout, MigrateLockTimeoutMax)
	}
	if c.MigrateLockRetryFor < c.MigrateLockTimeout {
		return envError("BUILDRISK_MIGRATE_LOCK_RETRY_FOR", "%s is less than BUILDRISK_MIGRATE_LOCK_TIMEOUT (%s)", c.MigrateLockRetryFor, c.MigrateLockTimeout)
	}
	if c.StaleAfter <= c.HeartbeatInterval {
		return envError("BUILDRISK_STALE_AFTER", "%s must exceed BUILDRISK_HEARTBEAT_INTERVAL %s", c.StaleAfter, c.HeartbeatInterval)
	}
	if err := worker.CheckFencing(c.FenceAfter, c.HeartbeatInterval, c.DBTimeout, c.StaleAfter); err != nil {
		return UsageError{fmt.Errorf("BUILDRISK_FENCE_AFTER (%s) + BUILDRISK_HEARTBEAT_INTERVAL (%s) + BUILDRISK_DB_STATEMENT_TIMEOUT (%s) must be less than BUILDRISK_STALE_AFTER (%s): "+
			"a worker cut off from the database must stop its work before another one can take it over; lower the first three or raise BUILDRISK_STALE_AFTER",
			c.FenceAfter, c.HeartbeatInterval, c.DBTimeout, c.StaleAfter)}
	}
	if c.WorkerRetention <= c.StaleAfter {
		return envError("BUILDRISK_WORKER_RETENTION", "%s must exceed BUILDRISK_STALE_AFTER %s", c.WorkerRetention, c.StaleAfter)
	}
	for _, p := range upstream.Providers {
		switch url := c.UpstreamURLs[p]; {
		case url == "":
		case !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://"):
			return envError("BUILDRISK_"+string(p)+"_URL", "%q is not an http(s) URL", url)
		case strings.HasPrefix(url, "http://") && !c.InsecureHTTPUpstream:
			return envError("BUILDRISK_"+string(p)+"_URL", "%q is plain http: provider keys go only over https (set BUILDRISK_INSECURE_HTTP_UPSTREAM=1 for a fake upstream)", url)
		}
	}
	// Read by the least-privilege migration itself (goose ENVSUB); checked
	// here so that a bad name stops `radar migrate` with a clear message.
	for _, r := range [][2]string{{"BUILDRISK_DB_APP_ROLE", v.DBAppRole}, {"BUILDRISK_DB_API_ROLE", v.DBAPIRole}} {
		if r[1] != "" && !roleNamePattern.MatchString(r[1]) {
			return envError(r[0], "%q is not a role name (lower-case letters, digits and _, at most 63)", r[1])
		}
	}
	return nil
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
