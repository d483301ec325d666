package config_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/config"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/api"
)

// Every bad value fails at start with a message naming the variable.
func TestEnv_BadValuesNameTheVariable(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"BUILDRISK_API_TOKENS":             "admin:x",
		"BUILDRISK_INSECURE_NO_AUTH":       "yes",
		"BUILDRISK_HEARTBEAT_INTERVAL":     "10",
		"BUILDRISK_STALE_AFTER":            "-1s",
		"BUILDRISK_REAP_INTERVAL":          "soon",
		"BUILDRISK_DRAIN_TIMEOUT":          "0s",
		"BUILDRISK_STOP_TIMEOUT":           "-1s",
		"BUILDRISK_FENCE_AFTER":            "soon",
		"BUILDRISK_DB_STATEMENT_TIMEOUT":   "0s",
		"BUILDRISK_FANOUT":                 "0",
		"BUILDRISK_DB_MAX_CONNS":           "0",
		"BUILDRISK_WORKER_RETENTION":       "30s",
		"BUILDRISK_IDEMPOTENCY_RETENTION":  "721h",
		"BUILDRISK_MOLIT_URL":              "ftp://x",
		"BUILDRISK_DB_API_ROLE":            "Radar-API",
		"BUILDRISK_SESSION_KEY":            "too-short",
		"BUILDRISK_DAILY_CAP_DART":         "many",
		"BUILDRISK_RATE_MOLIT":             "0",
		"BUILDRISK_RATE_KRX":               "-5",
		"BUILDRISK_RATE_DART":              "fast",
		"BUILDRISK_TIMEZONE":               "Mars/Olympus",
		"BUILDRISK_LOG_FORMAT":             "xml",
		"BUILDRISK_MAX_BODY_BYTES":         "1MB",
		"BUILDRISK_API_STATEMENT_TIMEOUT":  "1h",
		"BUILDRISK_API_LOCK_TIMEOUT":       "30s",
		"BUILDRISK_MIGRATE_LOCK_TIMEOUT":   "2m",
		"BUILDRISK_MIGRATE_LOCK_RETRY_FOR": "1s",
		"BUILDRISK_SCHEDULE_APTTRADE":      "61 * * * *",
		"BUILDRISK_DEADLINE_CREDITEVAL":    "7:30",
		"BUILDRISK_DEADLINE_METRICS":       "24:00",
		"BUILDRISK_FORECAST_INTERVAL":      "0s",
		"BUILDRISK_TRUSTED_PROXIES":        "proxy.internal",
		"BUILDRISK_ALLOWED_HOSTS":          "radar.internal:8080",
	}
	for name, value := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := config.LoadEnv(func(k string) string {
				if k == name {
					return value
				}
				return ""
			})
			require.Error(t, err)
			require.Contains(t, err.Error(), name)
			require.True(t, config.IsUsage(err))
		})
	}
	_, err := config.LoadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_HEARTBEAT_INTERVAL": "1m", "BUILDRISK_STALE_AFTER": "30s"}[k]
	})
	require.ErrorContains(t, err, "BUILDRISK_STALE_AFTER")
}

func TestEnv_Defaults(t *testing.T) {
	t.Parallel()
	env, err := config.LoadEnv(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, ":8080", env.HTTPAddr)
	require.Equal(t, ":9090", env.AdminAddr)
	require.Equal(t, 10*time.Second, env.HeartbeatInterval)
	require.Equal(t, 60*time.Second, env.StaleAfter)
	require.Equal(t, 30*time.Second, env.ReapInterval)
	require.Equal(t, 45*time.Second, env.DrainTimeout)
	require.Equal(t, 45*time.Second, env.StopTimeout, "a stop is bounded like a drain")
	require.Equal(t, 30*time.Second, env.FenceAfter, "half of BUILDRISK_STALE_AFTER")
	require.Equal(t, 5*time.Second, env.DBTimeout)
	require.Equal(t, 5*time.Second, env.MigrateLockTimeout)
	require.Equal(t, 2*time.Minute, env.MigrateLockRetryFor)
	require.Equal(t, 24*time.Hour, env.IdempotencyRetention)
	require.Equal(t, 5, env.FanOut)
	require.Equal(t, "Asia/Seoul", env.Location.String())
	require.Equal(t, 20000, env.DailyCaps["DART"])
	require.Equal(t, 10000, env.DailyCaps["MOLIT"])
	require.Equal(t, 10000, env.DailyCaps["KRX"])
	require.Equal(t, 50000, env.DailyCaps["CREDIT"])
	require.Empty(t, env.Rates, "no rate limit by default")
	require.Empty(t, env.UpstreamURLs)
	require.Error(t, config.RequireDatabaseURL(env))

	env, err = config.LoadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_UPSTREAM_URL": "http://fake:8090/", "BUILDRISK_DART_URL": "https://dart.example", "BUILDRISK_INSECURE_HTTP_UPSTREAM": "1"}[k]
	})
	require.NoError(t, err)
	require.Equal(t, "http://fake:8090", string(env.UpstreamURLs["MOLIT"]))
	require.Equal(t, "https://dart.example", env.UpstreamURLs["DART"], "the per-provider URL wins")
	require.True(t, env.InsecureHTTPUpstream)
}

// BUILDRISK_STOP_TIMEOUT defaults to BUILDRISK_DRAIN_TIMEOUT, set or not: a
// stop is bounded like a drain unless the operator says otherwise.
func TestEnv_StopTimeoutFollowsTheDrainTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vars map[string]string
		want time.Duration
	}{
		{map[string]string{"BUILDRISK_DRAIN_TIMEOUT": "20s"}, 20 * time.Second},
		{map[string]string{"BUILDRISK_DRAIN_TIMEOUT": "20s", "BUILDRISK_STOP_TIMEOUT": "5s"}, 5 * time.Second},
		{map[string]string{"BUILDRISK_STOP_TIMEOUT": "2m"}, 2 * time.Minute},
	} {
		env, err := config.LoadEnv(func(k string) string { return tc.vars[k] })
		require.NoError(t, err)
		require.Equal(t, tc.want, env.StopTimeout, "%v", tc.vars)
	}
}

// Provider URLs are https unless BUILDRISK_INSECURE_HTTP_UPSTREAM=1 (a fake
// upstream): a key never travels in clear by accident.
func TestEnv_ProviderURLsRequireHTTPS(t *testing.T) {
	t.Parallel()
	_, err := config.LoadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_MOLIT_URL": "http://molit.example"}[k]
	})
	require.ErrorContains(t, err, "BUILDRISK_MOLIT_URL")
	require.ErrorContains(t, err, "BUILDRISK_INSECURE_HTTP_UPSTREAM=1")
	env, err := config.LoadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_UPSTREAM_URL": "https://gw.example"}[k]
	})
	require.NoError(t, err)
	require.False(t, env.InsecureHTTPUpstream)
	_, err = config.LoadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_INSECURE_HTTP_UPSTREAM": "yes"}[k]
	})
	require.ErrorContains(t, err, "BUILDRISK_INSECURE_HTTP_UPSTREAM")
}

// Pool sizes follow the concurrency unless BUILDRISK_DB_MAX_CONNS says.
func TestEnv_ConnectionBudgets(t *testing.T) {
	t.Parallel()
	env, err := config.LoadEnv(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, int32(2*10+6), env.WorkerMaxConns(), "two per concurrent job, plus River's and the loops'")
	require.GreaterOrEqual(t, env.APIMaxConns(), int32(8))

	env, err = config.LoadEnv(func(k string) string { return map[string]string{"BUILDRISK_WORKER_CONCURRENCY": "3"}[k] })
	require.NoError(t, err)
	require.Equal(t, int32(2*3+6), env.WorkerMaxConns())

	env, err = config.LoadEnv(func(k string) string { return map[string]string{"BUILDRISK_DB_MAX_CONNS": "40"}[k] })
	require.NoError(t, err)
	require.Equal(t, int32(40), env.WorkerMaxConns())
	require.Equal(t, int32(40), env.APIMaxConns())
}

// The fencing inequality: BUILDRISK_FENCE_AFTER + BUILDRISK_HEARTBEAT_INTERVAL
// + BUILDRISK_DB_STATEMENT_TIMEOUT < BUILDRISK_STALE_AFTER, or a worker cut
// off from the database could still be working when another takes over.
// Settings that break it are refused naming every variable; the defaults
// derived from a short stale window keep it.
func TestEnv_FencingInequality(t *testing.T) {
	t.Parallel()
	load := func(vars map[string]string) (*config.Config, error) {
		return config.LoadEnv(func(k string) string { return vars[k] })
	}
	for name, vars := range map[string]map[string]string{
		// A derived value adapts to the ones set (see
		// TestEnv_DerivedDefaultsKeepFencing): only set values are refused.
		"FenceTooLate":       {"BUILDRISK_FENCE_AFTER": "50s"}, // leaves no room for any timeout
		"StatementTooLong":   {"BUILDRISK_DB_STATEMENT_TIMEOUT": "25s", "BUILDRISK_FENCE_AFTER": "30s"},
		"HeartbeatTooSparse": {"BUILDRISK_HEARTBEAT_INTERVAL": "25s", "BUILDRISK_FENCE_AFTER": "30s", "BUILDRISK_DB_STATEMENT_TIMEOUT": "5s"},
		"ExactlyEqual":       {"BUILDRISK_FENCE_AFTER": "45s", "BUILDRISK_DB_STATEMENT_TIMEOUT": "5s"}, // 45 + 10 + 5 = 60: not less
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := load(vars)
			require.Error(t, err)
			require.True(t, config.IsUsage(err))
			for _, v := range []string{"BUILDRISK_FENCE_AFTER", "BUILDRISK_HEARTBEAT_INTERVAL", "BUILDRISK_DB_STATEMENT_TIMEOUT", "BUILDRISK_STALE_AFTER"} {
				require.Contains(t, err.Error(), v)
			}
		})
	}
	env, err := load(map[string]string{"BUILDRISK_FENCE_AFTER": "44s"})
	require.NoError(t, err, "44 + 10 + 5 < 60")
	require.Equal(t, 44*time.Second, env.FenceAfter)
	env, err = load(map[string]string{"BUILDRISK_HEARTBEAT_INTERVAL": "200ms", "BUILDRISK_STALE_AFTER": "2s"})
	require.NoError(t, err)
	require.Equal(t, time.Second, env.FenceAfter)
	require.Equal(t, 500*time.Millisecond, env.DBTimeout)
}

// The derived defaults of BUILDRISK_FENCE_AFTER and
// BUILDRISK_DB_STATEMENT_TIMEOUT keep the fencing inequality for every stale
// window and heartbeat interval the service accepts, also when one of the two
// is set and the other derived: a start is never refused for a value the
// operator did not choose.
func TestEnv_DerivedDefaultsKeepFencing(t *testing.T) {
	t.Parallel()
	stales := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second,
		7 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 10 * time.Minute}
	heartbeats := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
		time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second, 30 * time.Second, 50 * time.Second}
	checked := 0
	for _, stale := range stales {
		for _, hb := range heartbeats {
			if hb*10 < stale/10 || hb >= stale*9/10 {
				continue // far outside any sane pairing, or too close to the window for any work
			}
			for _, explicit := range []string{"", "BUILDRISK_FENCE_AFTER", "BUILDRISK_DB_STATEMENT_TIMEOUT"} {
				vars := map[string]string{"BUILDRISK_STALE_AFTER": stale.String(), "BUILDRISK_HEARTBEAT_INTERVAL": hb.String()}
				switch explicit {
				case "BUILDRISK_FENCE_AFTER":
					vars[explicit] = ((stale - hb) / 2).String()
				case "BUILDRISK_DB_STATEMENT_TIMEOUT":
					vars[explicit] = ((stale - hb) / 4).String()
				}
				env, err := config.LoadEnv(func(k string) string { return vars[k] })
				require.NoError(t, err, "stale %s heartbeat %s explicit %q", stale, hb, explicit)
				require.Positive(t, env.FenceAfter)
				require.GreaterOrEqual(t, env.DBTimeout, time.Millisecond, "statement_timeout is set in whole milliseconds")
				require.Less(t, env.FenceAfter+env.HeartbeatInterval+env.DBTimeout, env.StaleAfter)
				checked++
			}
		}
	}
	require.Greater(t, checked, 100)
	// The case of the report, and the defaults unchanged where they fitted.
	env, err := config.LoadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_STALE_AFTER": "4s", "BUILDRISK_HEARTBEAT_INTERVAL": "1s"}[k]
	})
	require.NoError(t, err)
	require.Equal(t, time.Second, env.DBTimeout)
	require.Equal(t, 1500*time.Millisecond, env.FenceAfter)
	env, err = config.LoadEnv(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, env.FenceAfter)
	require.Equal(t, 5*time.Second, env.DBTimeout)
}

// A token shorter than 32 characters is refused at start, without quoting
// it; role:name:token entries name their tokens.
func TestEnv_TokensStrengthAndNames(t *testing.T) {
	t.Parallel()
	for _, tokens := range []string{"operator:short-secret", "operator:" + apptest.OpNew + ",viewer:alice:short-secret"} {
		_, err := config.LoadEnv(func(k string) string { return map[string]string{"BUILDRISK_API_TOKENS": tokens}[k] })
		require.ErrorContains(t, err, "BUILDRISK_API_TOKENS")
		require.ErrorContains(t, err, "at least 32 characters")
		require.NotContains(t, err.Error(), "short-secret")
	}
	env, err := config.LoadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_API_TOKENS": "operator:alice:" + apptest.OpNew + ",viewer:" + apptest.ViewerToken}[k]
	})
	require.NoError(t, err)
	require.Equal(t, "alice", env.TokenNames[apptest.OpNew])
	require.Regexp(t, `^fp-[0-9a-f]{8}$`, env.TokenNames[apptest.ViewerToken])

	// The session key: one, or new,old while rotating; each of 32 or more.
	for value, ok := range map[string]bool{apptest.OpNew: true, apptest.OpNew + "," + apptest.OpOld: true, apptest.OpNew + ",short": false, "short": false} {
		_, err := config.LoadEnv(func(k string) string { return map[string]string{"BUILDRISK_SESSION_KEY": value}[k] })
		if ok {
			require.NoError(t, err, value)
		} else {
			require.ErrorContains(t, err, "BUILDRISK_SESSION_KEY", value)
			require.NotContains(t, err.Error(), apptest.OpNew, "the error never quotes a key")
		}
	}
}

// Tokens from a mounted secret file, several per role; the file and the
// variable together are refused, as is a missing file.
func TestEnv_TokensFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(path, []byte("operator:"+apptest.OpNew+"\noperator:"+apptest.OpOld+"\nviewer:"+apptest.ViewerToken+"\n"), 0o600))
	env, err := config.LoadEnv(func(k string) string { return map[string]string{"BUILDRISK_API_TOKENS_FILE": path}[k] })
	require.NoError(t, err)
	require.True(t, env.TokensSet)
	require.Equal(t, map[string]api.Role{apptest.OpNew: api.RoleOperator, apptest.OpOld: api.RoleOperator, apptest.ViewerToken: api.RoleViewer}, env.Tokens)

	_, err = config.LoadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_API_TOKENS_FILE": path, "BUILDRISK_API_TOKENS": "operator:" + apptest.OpNew}[k]
	})
	require.ErrorContains(t, err, "BUILDRISK_API_TOKENS_FILE")
	_, err = config.LoadEnv(func(k string) string {
		return map[string]string{"BUILDRISK_API_TOKENS_FILE": path + ".missing"}[k]
	})
	require.ErrorContains(t, err, "BUILDRISK_API_TOKENS_FILE")
}

// BUILDRISK_TRUSTED_PROXIES takes addresses and CIDR prefixes; a prefix of
// every address is refused, since any client could then name its own.
func TestEnv_TrustedProxies(t *testing.T) {
	t.Parallel()
	load := func(v string) (*config.Config, error) {
		return config.LoadEnv(func(k string) string {
			if k == "BUILDRISK_TRUSTED_PROXIES" {
				return v
			}
			return ""
		})
	}
	env, err := load("10.1.2.3/8, 192.168.1.7 ::ffff:172.16.0.1,2001:db8::/32")
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"),
		netip.MustParsePrefix("172.16.0.1/32"), netip.MustParsePrefix("2001:db8::/32"),
	}, env.TrustedProxies)
	env, err = load("")
	require.NoError(t, err)
	require.Empty(t, env.TrustedProxies)
	for _, bad := range []string{"0.0.0.0/0", "::/0", "10.0.0.0/33", "fe80::1%eth0", "10.0.0.*"} {
		_, err := load(bad)
		require.ErrorContains(t, err, "BUILDRISK_TRUSTED_PROXIES", bad)
		require.True(t, config.IsUsage(err), bad)
	}
}

// BUILDRISK_ALLOWED_HOSTS: loopback names by default without
// authentication, any Host with it; names and addresses, never a port.
func TestEnv_AllowedHosts(t *testing.T) {
	t.Parallel()
	load := func(vars map[string]string) (*config.Config, error) {
		return config.LoadEnv(func(k string) string { return vars[k] })
	}
	env, err := load(map[string]string{"BUILDRISK_INSECURE_NO_AUTH": "1"})
	require.NoError(t, err)
	require.Equal(t, config.LoopbackHosts, env.AllowedHosts)
	env, err = load(map[string]string{"BUILDRISK_INSECURE_NO_AUTH": "1", "BUILDRISK_ALLOWED_HOSTS": "*"})
	require.NoError(t, err)
	require.Nil(t, env.AllowedHosts, "* is any Host")
	env, err = load(nil)
	require.NoError(t, err)
	require.Nil(t, env.AllowedHosts, "with authentication any Host by default")
	env, err = load(map[string]string{"BUILDRISK_ALLOWED_HOSTS": "Radar.Example.com., 10.0.0.7 [::FFFF:10.0.0.8],2001:DB8::1"})
	require.NoError(t, err)
	require.Equal(t, []string{"radar.example.com", "10.0.0.7", "10.0.0.8", "2001:db8::1"}, env.AllowedHosts)
	for _, bad := range []string{"radar:8080", "10.0.0.7:80", "http://radar", "radar/x", "*,radar", "ra dar!"} {
		_, err := load(map[string]string{"BUILDRISK_ALLOWED_HOSTS": bad})
		require.ErrorContains(t, err, "BUILDRISK_ALLOWED_HOSTS", bad)
	}
}

// Prefixes that together cover an address family's whole space are
// refused, ALLOW_WIDE or not; more than a /8 of public space only with
// BUILDRISK_TRUSTED_PROXIES_ALLOW_WIDE=1; private ranges of any size pass.
func TestEnv_TrustedProxiesTogetherTooWide(t *testing.T) {
	t.Parallel()
	load := func(v, allowWide string) (*config.Config, error) {
		return config.LoadEnv(func(k string) string {
			switch k {
			case "BUILDRISK_TRUSTED_PROXIES":
				return v
			case "BUILDRISK_TRUSTED_PROXIES_ALLOW_WIDE":
				return allowWide
			}
			return ""
		})
	}
	for _, whole := range []string{
		"0.0.0.0/1,128.0.0.0/1", "::/1,8000::/1",
		"0.0.0.0/2,64.0.0.0/2,128.0.0.0/1", "0.0.0.0/1,128.0.0.0/2,192.0.0.0/2,10.0.0.0/8",
	} {
		for _, allowWide := range []string{"", "1"} {
			_, err := load(whole, allowWide)
			require.ErrorContains(t, err, "whole", whole)
			require.True(t, config.IsUsage(err), whole)
		}
	}
	for _, wide := range []string{"1.0.0.0/7", "8.0.0.0/8,9.0.0.0/8", "2000::/7", "0.0.0.0/1"} {
		_, err := load(wide, "")
		require.ErrorContains(t, err, "BUILDRISK_TRUSTED_PROXIES_ALLOW_WIDE", wide)
		env, err := load(wide, "1")
		require.NoError(t, err, wide)
		require.NotEmpty(t, env.TrustedProxies)
	}
	for _, fine := range []string{"10.0.0.0/8,172.16.0.0/12,192.168.0.0/16", "8.0.0.0/8", "fc00::/7", "100.64.0.0/10"} {
		_, err := load(fine, "")
		require.NoError(t, err, fine)
	}
}

// BUILDRISK_TOKEN_RATE_LIMIT: generous by default, 0 turns it off, a bad
// value names the variable.
func TestEnv_TokenRateLimit(t *testing.T) {
	t.Parallel()
	load := func(v string) (*config.Config, error) {
		return config.LoadEnv(func(k string) string {
			if k == "BUILDRISK_TOKEN_RATE_LIMIT" {
				return v
			}
			return ""
		})
	}
	env, err := load("")
	require.NoError(t, err)
	require.Equal(t, api.TokenRateLimitDefault, env.TokenRateLimit)
	env, err = load("0")
	require.NoError(t, err)
	require.Zero(t, env.TokenRateLimit)
	for _, bad := range []string{"-1", "many", "1000001"} {
		_, err := load(bad)
		require.ErrorContains(t, err, "BUILDRISK_TOKEN_RATE_LIMIT", bad)
	}
}
