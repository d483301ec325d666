package api_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/buildrisk/radar/internal/apptest"
	"github.com/buildrisk/radar/internal/jobset"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/jobs/credit"
	"github.com/buildrisk/radar/queries/testfactory"
)

// Environment of the browser test.
const (
	// requireChromiumEnv makes a missing Chromium fail the browser test
	// instead of skipping it; .ci/run sets it after installing Chromium.
	requireChromiumEnv = "BUILDRISK_REQUIRE_CHROMIUM"
	// screenshotDirEnv is where the browser test saves its screenshots;
	// unset, they go to a temporary directory named in the test log.
	screenshotDirEnv = "BUILDRISK_SCREENSHOT_DIR"
)

// browserWait bounds every wait of the browser test for something to appear
// on the page.
const browserWait = 60 * time.Second

// chromiumPath finds Debian's chromium, or skips (fails in CI) without it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv(requireChromiumEnv) == "1" {
		t.Fatalf("chromium is not installed and %s=1: apt-get install -y chromium", requireChromiumEnv)
	}
	t.Skipf("chromium is not installed (apt-get install -y chromium); %s=1 makes this a failure", requireChromiumEnv)
	return ""
}

// browser is one headless Chromium tab on the console, with the console
// messages the page wrote and a directory for screenshots.
type browser struct {
	t        *testing.T
	ctx      context.Context
	base     string
	shotDir  string
	shots    int
	mu       sync.Mutex
	messages []chromedp.ConsoleMessage
}

// newBrowser starts the tab; opts add to (or override) the allocator's
// options, such as the browser's time zone.
func newBrowser(t *testing.T, base string, opts ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	path := chromiumPath(t)
	shotDir := os.Getenv(screenshotDirEnv)
	if shotDir == "" {
		shotDir = t.TempDir()
	}
	shotDir = filepath.Join(shotDir, t.Name())
	require.NoError(t, os.MkdirAll(shotDir, 0o755))
	t.Logf("screenshots in %s", shotDir)

	// The flags a root user in a container needs, and nothing that reaches
	// the network on its own.
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	}, opts...)...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 4*time.Minute)
	b := &browser{t: t, ctx: ctx, base: base, shotDir: shotDir}

	messages := chromedp.Console(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.messages = append(b.messages, m)
			b.mu.Unlock()
		}
	})
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
		wg.Wait()
	})
	return b
}

// do runs actions and fails the test on an error.
func (b *browser) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.screenshot("failed")
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression.
func eval[T any](b *browser, expression string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expression))
	require.NoError(b.t, err, expression)
	return v
}

// waitFor evaluates a JavaScript expression until it is true, within
// browserWait. An evaluation that fails (the page is navigating and its
// script context is gone) is retried like a false one.
func (b *browser) waitFor(what, expression string) {
	b.t.Helper()
	deadline := time.Now().Add(browserWait)
	var lastErr error
	for {
		ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool]("Boolean("+expression+")"))
		if err == nil && ok {
			return
		}
		lastErr = err
		if time.Now().After(deadline) || b.ctx.Err() != nil {
			b.screenshot("failed")
			page, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string]("document.body.innerText"))
			b.t.Fatalf("waiting for %s (%s): still false (last error: %v)\npage text:\n%s", what, expression, lastErr, page)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// click clicks the first element matching selector from the page's own
// script: the console redraws its tables every poll, so a node found by one
// protocol call may be replaced before the next one.
func (b *browser) click(selector string) {
	b.t.Helper()
	b.waitFor(selector, fmt.Sprintf("document.querySelector(%q) !== null", selector))
	eval[bool](b, fmt.Sprintf("(document.querySelector(%q).click(), true)", selector))
}

// text returns the text of the first element matching selector ("" when
// there is none).
func (b *browser) text(selector string) string {
	b.t.Helper()
	return eval[string](b, fmt.Sprintf("(document.querySelector(%q) || {innerText: ''}).innerText", selector))
}

// typeInto replaces an input's value by typing, so the page sees input events.
func (b *browser) typeInto(selector, value string) {
	b.t.Helper()
	eval[bool](b, fmt.Sprintf(`(document.querySelector(%q).value = "", true)`, selector))
	b.Do("typing into "+selector, chromedp.SendKeys(chromedp.CSS(selector), value))
}

// screenshot saves the whole page as NN-name.png.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	b.shots++
	file := filepath.Join(b.shotDir, fmt.Sprintf("%02d-%s.png", b.shots, name))
	require.NoError(b.t, os.WriteFile(file, png, 0o644))
}

// scriptErrors returns the page's uncaught exceptions, console.error calls
// and browser log errors other than the network's (an expected 409 is logged
// by the browser as a failed resource).
func (b *browser) scriptErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.messages {
		if m.IsException() || (m.Type == chromedp.ConsoleError && m.Source != "network") {
			out = append(out, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
		}
	}
	return out
}

func (b *browser) Login(token string) {
	b.t.Helper()
	b.Do("opening the console", chromedp.Navigate(b.base+"/"))
	b.waitFor("the login form", `location.pathname === "/login" && document.querySelector("#token") !== null`)
	b.Do("logging in",
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Submit(chromedp.CSS("#login-form")))
	b.waitFor("the job table", `location.pathname === "/" && document.querySelector('#jobs tr[data-job="aptTrade"]') !== null`)
}

// The console in headless Chromium against the whole system: an operator
// requests aptTrade from the form after seeing its estimate, watches it
// complete without a reload, reads the 409 of a second request with a link
// to the active one, stops a run (STOPPING, then STOPPED), finds it among
// the runs stopped or capped today and resumes it (the estimate and the
// resumed execution's figures are what was left); a viewer finds no
// action; the page is usable at phone width; no script error all along.
func TestConsole_Browser(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, &apptest.Opts{Env: map[string]string{"BUILDRISK_DAILY_CAP_MOLIT": "1000"}})
	s.StartWorker()
	b := newBrowser(t, s.API.URL)

	b.Login(apptest.OperatorToken)
	require.Equal(t, "operator", b.text("#role"))
	// A marker that a reload would wipe out.
	eval[bool](b, "(window.__sameDocument = true)")
	b.screenshot("operator")

	// Request aptTrade from the form: the estimate comes first.
	b.click(`button[data-action="request"][data-job="aptTrade"]`)
	b.waitFor("the request form", `!document.querySelector("#request-panel").hidden && document.querySelector("#field-regions") !== null`)
	require.True(t, eval[bool](b, `document.querySelector("#submit-request").disabled`), "no request before an estimate")
	b.typeInto("#field-regions", "11110, 11140")
	b.typeInto("#field-from", "2025-01")
	b.typeInto("#field-to", "2025-02")
	b.Do("estimating", chromedp.Click(chromedp.CSS("#estimate-button")))
	b.waitFor("the estimate", `document.querySelector("#estimated-calls") !== null`)
	require.Equal(t, "4", b.text("#estimated-calls"))
	require.Contains(t, b.text("#estimate-result"), "MOLIT: 1,000 of 1,000")
	require.Equal(t, 0, s.Count("SELECT count(*) FROM job_request"), "the estimate wrote nothing")
	require.False(t, eval[bool](b, `document.querySelector("#submit-request").disabled`))
	b.screenshot("estimate")

	// A change forgets the estimate.
	b.typeInto("#field-to", "2025-03")
	require.True(t, eval[bool](b, `document.querySelector("#submit-request").disabled`), "a changed form needs a new estimate")
	b.Do("estimating again", chromedp.Click(chromedp.CSS("#estimate-button")))
	b.waitFor("the new estimate", `(document.querySelector("#estimated-calls") || {}).innerText === "6"`)

	b.Do("requesting", chromedp.Click(chromedp.CSS("#submit-request")))
	b.waitFor("the accepted request", `document.querySelector("#estimate-result a.request-link") !== null`)
	first := strings.TrimPrefix(b.text("#estimate-result a.request-link"), "request ")
	b.waitFor("COMPLETED in the request table", fmt.Sprintf(`(document.querySelector("#request-%s .exec-status") || {innerText: ""}).innerText.includes("COMPLETED")`, first))
	require.Contains(t, b.text("#request-"+first+" .progress"), "6 / 6 chunks")
	require.Contains(t, b.text("#request-"+first+" .calls"), "6 of ~6")
	// The budget is read by its own poll, which may have run just before the
	// run gave its unspent leases back: the page shows them back soon after.
	b.waitFor("the budget after the run", fmt.Sprintf(`document.querySelector("#request-%s").innerText.includes("MOLIT: 994 of 1,000")`, first))
	require.True(t, eval[bool](b, "window.__sameDocument === true"), "progress arrived without a reload")
	b.screenshot("completed")

	// A run held at its second call: a second request gets the 409 with a
	// link to the active request.
	s.Gate.Arm(1)
	b.typeInto("#field-from", "2024-01")
	b.typeInto("#field-to", "2024-06")
	b.Do("estimating", chromedp.Click(chromedp.CSS("#estimate-button")))
	b.waitFor("the estimate", `(document.querySelector("#estimated-calls") || {}).innerText === "12"`)
	b.Do("requesting", chromedp.Click(chromedp.CSS("#submit-request")))
	b.waitFor("the accepted request", `document.querySelector("#estimate-result a.request-link") !== null`)
	running := strings.TrimPrefix(b.text("#estimate-result a.request-link"), "request ")
	require.NotEqual(t, first, running)
	select {
	case <-s.Gate.Blocked:
	case <-time.After(browserWait):
		t.Fatal("the run never reached its second call")
	}
	b.waitFor("the stop button", `document.querySelector('button[data-action="stop"][data-job="aptTrade"]') !== null`)
	b.waitFor("the worker running it", fmt.Sprintf(`document.querySelector("#workers tbody").innerText.includes("aptTrade request %s")`, running))
	require.False(t, eval[bool](b, `document.querySelector('[data-action="abandon"]') !== null`),
		"no abandon button: the worker is alive, so the API would refuse")

	b.typeInto("#field-to", "2024-07")
	b.Do("estimating", chromedp.Click(chromedp.CSS("#estimate-button")))
	b.waitFor("the estimate", `(document.querySelector("#estimated-calls") || {}).innerText === "14"`)
	b.Do("requesting again", chromedp.Click(chromedp.CSS("#submit-request")))
	b.waitFor("the 409 explained", `document.querySelector("#form-error").innerText.includes("Duplicate active request")`)
	conflict := b.text("#form-error")
	require.Contains(t, conflict, "job aptTrade already has an active request "+running)
	require.Contains(t, conflict, "The active one is request "+running)
	require.Equal(t, "#request-"+running, eval[string](b, `document.querySelector("#form-error a.request-link").getAttribute("href")`))
	b.screenshot("conflict")
	b.click("#form-error a.request-link")
	b.waitFor("the request's detail", fmt.Sprintf(`!document.querySelector("#request-detail").hidden && document.querySelector("#detail-id").innerText === %q`, running))

	// Stop: STOPPING while the held call is in flight, STOPPED once it ends.
	b.click(`button[data-action="stop"][data-job="aptTrade"]`)
	b.waitFor("STOPPING", fmt.Sprintf(`(document.querySelector("#request-%s .exec-status") || {innerText: ""}).innerText.includes("STOPPING")`, running))
	require.Contains(t, b.text("#errors"), "is STOPPING")
	require.False(t, eval[bool](b, `document.querySelector('button[data-action="stop"]') !== null`), "no stop button for a STOPPING run (the API would answer 409)")
	b.screenshot("stopping")
	s.Gate.Open()
	b.waitFor("STOPPED", fmt.Sprintf(`(document.querySelector("#request-%s .exec-status") || {innerText: ""}).innerText.includes("STOPPED")`, running))
	require.True(t, eval[bool](b, "window.__sameDocument === true"), "still the same page")
	b.screenshot("stopped")

	// Stopped or capped today: the stopped run with its cause, counted,
	// with a link to the request list filtered so.
	stoppedRow := fmt.Sprintf(`#stopped tr[data-request="%s"]`, running)
	b.waitFor("the stop among today's", fmt.Sprintf("document.querySelector(%q) !== null", stoppedRow))
	require.Equal(t, "operator", b.text(stoppedRow+" .cause"))
	require.Contains(t, b.text(stoppedRow+" .progress"), "2 / 12 chunks")
	require.Equal(t, "1", b.text("#stopped-count"))
	require.Equal(t, "/v1/requests?outcome=STOPPED&endedOn=today", eval[string](b, `document.querySelector("#stopped-link").getAttribute("href")`))
	b.screenshot("stopped-today")

	// Its resume from the form: the estimate is the 10 calls of the chunks
	// left; the resumed execution's figures are its own (10 of the 10
	// chunks it had to do, 10 calls), its instance's all 12 chunks.
	b.typeInto("#field-to", "2024-06")
	b.Do("estimating the resume", chromedp.Click(chromedp.CSS("#estimate-button")))
	b.waitFor("the resume's estimate", `(document.querySelector("#estimated-calls") || {}).innerText === "10"`)
	b.Do("resuming", chromedp.Click(chromedp.CSS("#submit-request")))
	b.waitFor("the accepted resume", `document.querySelector("#estimate-result a.request-link") !== null`)
	resume := strings.TrimPrefix(b.text("#estimate-result a.request-link"), "request ")
	require.Contains(t, b.text("#estimate-result"), "resuming execution")
	b.waitFor("the resume COMPLETED", fmt.Sprintf(`(document.querySelector("#request-%s .exec-status") || {innerText: ""}).innerText.includes("COMPLETED")`, resume))
	require.Contains(t, b.text("#request-"+resume+" .progress"), "10 / 10 chunks")
	require.Contains(t, b.text("#request-"+resume+" .calls"), "10 of ~10")
	b.click("#request-" + resume + " a.request-link")
	b.waitFor("the resume's detail", fmt.Sprintf(`document.querySelector("#detail-id").innerText === %q && document.querySelector("#detail-body").innerText.includes("Instance")`, resume))
	require.Contains(t, b.text("#detail-body"), "12 of 12 chunks")
	require.Contains(t, b.text("#detail-body"), "10 / 10 (2 committed before it)")
	b.waitFor("the stop still counted once", `document.querySelector("#stopped-count").innerText === "1"`)
	b.screenshot("resumed")

	// The audit trail shows the stop and the requests, by the token's name.
	b.waitFor("the stop in the audit trail", `document.querySelector("#audit tbody").innerText.includes("stop")`)
	require.Contains(t, b.text("#audit tbody"), "aptTrade")
	require.Contains(t, b.text("#audit tbody"), "request "+first)

	// River UI is linked for operators and opens.
	require.Equal(t, "/riverui/", eval[string](b, `document.querySelector("#riverui-link").getAttribute("href")`))

	// The viewer: everything visible, no action.
	b.Do("logging out", chromedp.Click(chromedp.CSS("#logout")))
	b.waitFor("the login page", `location.pathname === "/login"`)
	b.Login(apptest.ViewerToken)
	require.Equal(t, "viewer", b.text("#role"))
	b.waitFor("the requests", fmt.Sprintf(`document.querySelector("#request-%s") !== null`, running))
	require.Contains(t, b.text("#request-"+running+" .exec-status"), "STOPPED")
	require.Equal(t, 0, eval[int](b, `document.querySelectorAll('button.action, [data-action], #request-form, #riverui-link').length`),
		"a viewer has no action button")
	b.screenshot("viewer")

	// A phone: nothing wider than the screen but the tables' own scrolling.
	b.Do("emulating a phone", chromedp.EmulateViewport(390, 844))
	b.waitFor("the phone layout", "window.innerWidth === 390")
	require.LessOrEqual(t, eval[int](b, "document.documentElement.scrollWidth"), 390, "the page fits a phone's width")
	b.screenshot("phone")

	require.Empty(t, b.scriptErrors(), "the page's console has no script error")
}

// The abandon button appears only where the API would accept it: on a
// running execution whose worker stopped heartbeating. Pressing it abandons
// the execution and frees the job.
func TestConsole_BrowserAbandon(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil) // no worker: nothing reaps the dead one's run
	_, executionID := s.InsertRunning("1@dead#a", time.Now().Add(-time.Hour))
	testfactory.RiskAlert(context.Background(), t, s.Pool, &testfactory.RiskAlertOpts{
		CorpCode: "00126380", AlertDate: time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC), Rule: "PRICE_DRAWDOWN", Severity: "high",
		Values: []byte(`{"drawdownPct": 31.5, "threshold": 30}`), ExecutionID: 1,
	})
	b := newBrowser(t, s.API.URL)

	b.Login(apptest.OperatorToken)
	// The rules job's alerts are listed with the values that fired them.
	b.waitFor("the alert", `document.querySelector("#alerts tbody").innerText.includes("PRICE_DRAWDOWN")`)
	require.Equal(t, "of 2025-03-14", b.text("#alerts-date"))
	require.Contains(t, b.text("#alerts tbody"), `"drawdownPct":31.5`)
	button := fmt.Sprintf(`button[data-action="abandon"][data-execution="%d"]`, executionID)
	b.waitFor("the abandon button", fmt.Sprintf("document.querySelector(%q) !== null", button))
	require.Contains(t, b.text(`#workers tbody`), "dead")
	b.screenshot("abandonable")
	b.click(button)
	b.waitFor("the abandon notice", `document.querySelector("#errors").innerText.includes("ABANDONED")`)
	b.waitFor("the job no longer running", `document.querySelector('#job-aptTrade .running').innerText.startsWith("idle")`)
	require.Contains(t, b.text("#job-aptTrade .last-exec"), "ABANDONED")
	require.False(t, eval[bool](b, `document.querySelector('[data-action="abandon"]') !== null`), "nothing left to abandon")
	require.Equal(t, "ABANDONED", s.ExecutionStatus(executionID))
	b.screenshot("abandoned")
	require.Empty(t, b.scriptErrors(), "the page's console has no script error")

	// River UI, linked from the console, renders with the session cookie.
	b.click("#riverui-link")
	// Its job list loaded through its own API (no River job runs here).
	b.waitFor("River UI", `location.pathname.startsWith("/riverui/") && document.body.innerText.includes("No jobs found")`)
	b.screenshot("riverui")
}

// The console's Coverage section in headless Chromium: creditEval's two
// targets without a grade for today are counted, the count opens their
// list, and an operator's "Run only missing" opens the request form with
// onlyMissing checked; no script error.
func TestConsole_BrowserCoverage(t *testing.T) {
	t.Parallel()
	env := map[string]string{"BUILDRISK_COVERAGE_MAX_AGE": "200ms"}
	maps.Copy(env, scheduledEnv)
	s := apptest.New(t, &apptest.Opts{Env: env})
	ctx := context.Background()
	codes := []string{s.Fake.Companies()[0].CorpCode, s.Fake.Companies()[1].CorpCode, s.Fake.Companies()[2].CorpCode}
	testfactory.Exposure(ctx, t, s.Pool, map[string]int64{codes[0]: 1000, codes[1]: 1000, codes[2]: 1000})
	testfactory.CreditGrade(ctx, t, s.Pool, &testfactory.CreditGradeOpts{CorpCode: codes[1], EvalDate: s.CreditToday(), ExecutionID: 1})
	// A browser in neither the schedule's zone nor UTC: the console shows
	// times in the browser's own.
	b := newBrowser(t, s.API.URL, chromedp.Env("TZ=America/New_York", "LANG=en_US.UTF-8"))

	// Yesterday: a failed run with every target graded; the day before, a
	// missed due time.
	s.SeedHistory(credit.Name, 1, "FAILED")
	s.SeedMissed(credit.Name, 2)
	tz := s.Env.Location.String()
	var dbToday time.Time
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT (clock_timestamp() AT TIME ZONE $1)::date`, tz).Scan(&dbToday))
	for _, code := range codes {
		testfactory.CreditGrade(ctx, t, s.Pool, &testfactory.CreditGradeOpts{CorpCode: code, EvalDate: dbToday.AddDate(0, 0, -1), ExecutionID: 1})
	}
	today, yesterday, before := dbToday.Format(time.DateOnly), dbToday.AddDate(0, 0, -1).Format(time.DateOnly), dbToday.AddDate(0, 0, -2).Format(time.DateOnly)

	b.Login(apptest.OperatorToken)
	row := `#coverage tr[data-job="creditEval"]`
	b.waitFor("creditEval's coverage", fmt.Sprintf(`document.querySelector('%s .missing') !== null && document.querySelector('%s .missing').innerText === "2"`, row, row))
	require.Equal(t, "3", b.text(row+" .targets"))
	require.Equal(t, "1", b.text(row+" .current"))
	// The strip: 14 days per job, oldest first, each titled with its
	// date, outcome and coverage %.
	strip := `#history tr[data-job="creditEval"] .strip .day`
	b.waitFor("creditEval's strip", fmt.Sprintf(`document.querySelectorAll('%s').length === 14`, strip))
	require.Equal(t, float64(len(jobset.Catalog().All())), eval[float64](b, `document.querySelectorAll("#history tbody tr[data-job]").length`), "a strip per job")
	title := func(day string) string {
		return eval[string](b, fmt.Sprintf(`document.querySelector('%s[data-day="%s"]').title`, strip, day))
	}
	require.Equal(t, today+": none, 33.3% (1 of 3)", title(today))
	require.Equal(t, yesterday+": failed, 100% (3 of 3)", title(yesterday))
	require.Equal(t, before+": missed, 0% (0 of 3)", title(before))
	require.Equal(t, today, eval[string](b, fmt.Sprintf(`Array.from(document.querySelectorAll('%s')).at(-1).dataset.day`, strip)), "today on the right")
	require.Equal(t, "none, no coverage", eval[string](b,
		`document.querySelector('#history tr[data-job="corpCodeSync"] .strip .day').title.replace(/^[0-9-]+: /, "")`))
	// Counted says how long ago, once.
	require.Regexp(t, `^\d+[smh] ago$`, b.text(row+" td:nth-child(6)"), "the Counted column")
	// The strip's shades have a legend; a day without targets is drawn
	// apart from a day without a run.
	legend := b.text("#history-legend")
	for _, entry := range []string{"completed", "failed", "missed", "none (no run; light grey)", "dark grey bar: share of targets covered", "no targets that day"} {
		require.Contains(t, legend, entry)
	}
	_, coverage := s.Get("/v1/coverage")
	for _, c := range coverage["coverage"].([]any) {
		c := c.(map[string]any)
		if c["targets"] != float64(0) {
			continue
		}
		day := fmt.Sprintf(`#history tr[data-job="%s"] .strip .day[data-day="%s"]`, c["job"], c["dataDate"])
		require.Contains(t, eval[string](b, fmt.Sprintf(`document.querySelector('%s').title`, day)), "no targets (0 of 0)", c["job"])
		require.True(t, eval[bool](b, fmt.Sprintf(`document.querySelector('%s').classList.contains("no-targets")`, day)), c["job"])
		require.True(t, eval[bool](b, fmt.Sprintf(`document.querySelector('%s .pct') === null`, day)), "%s: no bar", c["job"])
		require.NotEqual(t,
			eval[string](b, fmt.Sprintf(`getComputedStyle(document.querySelector('%s')).outlineStyle`, day)),
			eval[string](b, `getComputedStyle(document.querySelector('#history tr[data-job="corpCodeSync"] .strip .day')).outlineStyle`),
			"a day without targets does not look like a day with none")
	}
	// The schedule names its zone (every time the api sends is UTC); its
	// next due time is shown in the browser's zone.
	require.Contains(t, b.text("#job-rules"), "cron in Asia/Seoul")
	_, rules := s.Get("/v1/jobs/rules")
	next, err := time.Parse(time.RFC3339, rules["next"].(string))
	require.NoError(t, err)
	newYork, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	require.Contains(t, b.text("#job-rules"), "next "+next.In(newYork).Format("1/2/2006, 3:04:05 PM")+" "+next.In(newYork).Format("MST"))
	b.screenshot("coverage")
	b.click(row + " .missing a")
	b.waitFor("the missing list", `!document.querySelector("#coverage-missing").hidden`)
	missing := b.text("#coverage-missing")
	require.Contains(t, missing, codes[0])
	require.Contains(t, missing, codes[2])
	require.NotContains(t, missing, codes[1])
	b.click(`button[data-action="only-missing"][data-job="creditEval"]`)
	b.waitFor("the request form", `!document.querySelector("#request-panel").hidden && document.querySelector("#field-onlyMissing") !== null`)
	require.True(t, eval[bool](b, `document.querySelector("#field-onlyMissing").checked`))
	require.Empty(t, b.scriptErrors(), "the page's console has no script error")
}

// The pages around the console in headless Chromium: the problem type
// pages wear the console's stylesheet, /favicon.ico is an image, and /docs
// offers the host and scheme that serve it as the server variables'
// defaults (not https://localhost:8080 whatever the port); no script error.
func TestConsole_BrowserPages(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	b := newBrowser(t, s.API.URL)

	for _, path := range []string{"/problems/", "/problems/duplicate-active-request"} {
		b.Do("opening "+path, chromedp.Navigate(b.base+path))
		b.waitFor(path+" styled", `getComputedStyle(document.body).backgroundColor === "rgb(246, 247, 249)"`)
		require.Equal(t, "system-ui", eval[string](b, `getComputedStyle(document.body).fontFamily.split(",")[0]`), path)
		require.True(t, eval[bool](b, `document.querySelector('link[rel="icon"]') !== null`), "%s links the favicon", path)
		b.screenshot("problems")
	}

	b.Do("opening the favicon", chromedp.Navigate(b.base+"/favicon.ico"))
	b.waitFor("the favicon decoded", `(() => { const i = document.querySelector("img"); return i !== null && i.complete && i.naturalWidth >= 16; })()`)

	b.Do("opening /docs", chromedp.Navigate(b.base+"/docs"))
	b.waitFor("the document loaded", `(() => { const e = document.querySelector("elements-api"); return e !== null && typeof e.apiDescriptionDocument === "object" && e.apiDescriptionDocument !== null; })()`)
	vars := eval[map[string]any](b, `document.querySelector("elements-api").apiDescriptionDocument.servers[1].variables`)
	host := strings.TrimPrefix(s.API.URL, "http://")
	require.Equal(t, host, vars["host"].(map[string]any)["default"], "the host that serves /docs")
	require.Equal(t, "http", vars["scheme"].(map[string]any)["default"], "the scheme that serves /docs")
	b.waitFor("the reference rendered", `document.body.innerText.includes("buildrisk-radar")`)
	b.screenshot("docs")
	require.Empty(t, b.scriptErrors(), "the pages' consoles have no script error")
}

// An operator's stop reads in River UI with a word of why: the River job
// of a stopped run is cancelled, and its page shows the run's outcome (the
// worker records it as the job's output): STOPPED and the execution's
// message.
func TestConsole_BrowserRiverUIStop(t *testing.T) {
	t.Parallel()
	s := apptest.New(t, nil)
	s.StartWorker()
	s.Gate.Arm(1)
	status, out := s.Post("/v1/jobs/aptTrade/requests", apptest.AptTradeBody([]string{"11110", "11140"}, "2024-01", "2024-06"))
	require.Equal(t, http.StatusAccepted, status, "%v", out)
	<-s.Gate.Blocked
	status, _ = s.Post("/v1/jobs/aptTrade/stop", "")
	require.Equal(t, http.StatusAccepted, status)
	s.Gate.Open()
	s.WaitRequest(out["requestId"].(string), "DONE", "FAILED")
	// The River job only delivered the run and ended at its claim; the
	// request's end is recorded as its output, the stop's cause with it.
	var riverJobID int64
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT id FROM river_job WHERE state = 'completed'
		AND metadata->'output'->>'status' = 'STOPPED' AND metadata->'output'->>'cause' = 'operator'`).Scan(&riverJobID))

	b := newBrowser(t, s.API.URL)
	b.Login(apptest.OperatorToken)
	b.Do("opening the River job", chromedp.Navigate(fmt.Sprintf("%s/riverui/jobs/%d", b.base, riverJobID)))
	b.waitFor("the job's page", `document.body.innerText.includes("aptTrade") || document.body.innerText.includes("buildrisk")`)
	// The output is one click away under Metadata.
	b.waitFor("the output opened", `(() => {
		const b = Array.from(document.querySelectorAll('[role="button"]')).find((e) => e.textContent.includes('"output"'));
		if (!b) return false;
		if (b.getAttribute("aria-expanded") !== "true") b.click();
		return b.getAttribute("aria-expanded") === "true";
	})()`)
	b.waitFor("the stop's why", `document.body.innerText.includes("stopped on request at a chunk boundary")`)
	require.Contains(t, b.text("body"), `"STOPPED"`)
	b.screenshot("riverui-stopped")
}

// The console's Deadline column in headless Chromium: creditEval, idle and
// never completed, is marked late; aptTrade, forecast to end 3 minutes
// after its deadline, is marked at risk with that distance; both as words
// with a label for screen readers (the colour only repeats them), times in
// the browser's own zone; corpCodeSync, without a deadline, shows nothing
// new, at phone width too; no script error.
func TestConsole_BrowserDeadlines(t *testing.T) {
	t.Parallel()
	s, deadline, forecast := deadlineSystem(t)
	// A browser in neither the deadlines' zone nor UTC.
	b := newBrowser(t, s.API.URL, chromedp.Env("TZ=America/New_York", "LANG=en_US.UTF-8"))
	newYork, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	local := func(at time.Time) string {
		return at.In(newYork).Format("1/2/2006, 3:04:05 PM") + " " + at.In(newYork).Format("MST")
	}

	b.Login(apptest.ViewerToken)
	require.Equal(t, "Deadline", b.text("#jobs thead th.deadline"))
	b.waitFor("the late mark", `document.querySelector("#job-creditEval .deadline-status") !== null`)
	b.waitFor("the at-risk mark", `document.querySelector("#job-aptTrade .deadline-status") !== null`)

	late := "#job-creditEval td.deadline"
	require.Equal(t, "late", eval[string](b, `document.querySelector("#job-creditEval").dataset.deadlineStatus`))
	require.Equal(t, "Deadline status: late", eval[string](b, `document.querySelector("#job-creditEval .deadline-status").textContent`))
	require.True(t, eval[bool](b, `document.querySelector("#job-creditEval .deadline-status").classList.contains("ds-late")`))
	require.Contains(t, b.text(late+" .deadline-at"), "last deadline missed; next ")
	require.Empty(t, b.text(late+" .forecast-gap"), "nothing runs: no forecast")

	risk := "#job-aptTrade td.deadline"
	require.Equal(t, "at-risk", eval[string](b, `document.querySelector("#job-aptTrade").dataset.deadlineStatus`))
	require.Equal(t, "Deadline status: at risk", eval[string](b, `document.querySelector("#job-aptTrade .deadline-status").textContent`))
	require.Equal(t, "at risk: the running execution is forecast to end after its deadline",
		eval[string](b, `document.querySelector("#job-aptTrade .deadline-status").title`))
	require.Equal(t, "due "+local(deadline), b.text(risk+" .deadline-at"))
	require.Equal(t, "forecast 3 min after the deadline", b.text(risk+" .forecast-gap"))
	require.Equal(t, "forecast end "+local(forecast), b.text(risk+" .forecast"))

	// The label is for screen readers: on screen the badge reads "at risk".
	require.LessOrEqual(t, eval[float64](b, `document.querySelector("#job-aptTrade .deadline-status .sr-only").getBoundingClientRect().width`), 1.0)
	require.Less(t, eval[float64](b, `document.querySelector("#job-aptTrade .deadline-status").getBoundingClientRect().width`), 80.0,
		"the badge is as wide as its visible words")

	// No deadline: an empty cell.
	require.Equal(t, 0, eval[int](b, `document.querySelector("#job-corpCodeSync td.deadline").childNodes.length`))
	require.False(t, eval[bool](b, `"deadlineStatus" in document.querySelector("#job-corpCodeSync").dataset`))
	b.screenshot("deadlines")

	// A phone: the cards keep the marks; a job without a deadline has no
	// empty Deadline line.
	b.Do("emulating a phone", chromedp.EmulateViewport(390, 844))
	b.waitFor("the phone layout", "window.innerWidth === 390")
	require.Equal(t, "none", eval[string](b, `getComputedStyle(document.querySelector("#job-corpCodeSync td.deadline")).display`))
	require.NotEqual(t, "none", eval[string](b, `getComputedStyle(document.querySelector("#job-creditEval td.deadline")).display`))
	require.LessOrEqual(t, eval[int](b, "document.documentElement.scrollWidth"), 390, "the page fits a phone's width")
	b.screenshot("deadlines-phone")

	require.Empty(t, b.scriptErrors(), "the page's console has no script error")
}
