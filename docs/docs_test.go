package docs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// root is the repository's root, relative to this package's directory.
const root = ".."

// runbook is the document the alerts' runbook_url annotations point into,
// relative to the repository's root.
const runbook = "docs/operations.md"

func TestVariables(t *testing.T) {
	t.Parallel()

	md := "# Title\n\n| variable | default | meaning |\n|---|---|---|\n" +
		"| `DATABASE_URL` | unset | where | the database |\n" +
		"| `BUILDRISK_KEY_<P>` | unset | a key |\n" +
		"| `not_a_var` | x | y |\n" +
		"| placeholder | stands for |\n" +
		"text mentioning `BUILDRISK_FANOUT` outside a table\n"
	vars := Variables(md)
	require.Equal(t, []Variable{
		{Name: "DATABASE_URL", Default: "unset", Meaning: "where | the database"},
		{Name: "BUILDRISK_KEY_<P>", Default: "unset", Meaning: "a key"},
	}, vars)
}

func TestExpandAndPattern(t *testing.T) {
	t.Parallel()

	values := map[string][]string{"P": {"DART", "KRX"}, "JOB": {"A"}}
	got, ok := Expand("BUILDRISK_<P>_URL", values)
	require.True(t, ok)
	require.Equal(t, []string{"BUILDRISK_DART_URL", "BUILDRISK_KRX_URL"}, got)
	got, ok = Expand("X_<P>_<JOB>", values)
	require.True(t, ok)
	require.Equal(t, []string{"X_DART_A", "X_KRX_A"}, got)
	got, ok = Expand("DATABASE_URL", values)
	require.True(t, ok)
	require.Equal(t, []string{"DATABASE_URL"}, got)
	_, ok = Expand("BUILDRISK_RULE_<NAME>", values)
	require.False(t, ok, "an unknown placeholder")
	require.Equal(t, []string{"P", "JOB"}, Placeholders("X_<P>_<JOB>"))

	re := Pattern("BUILDRISK_<P>_URL")
	require.True(t, re.MatchString("BUILDRISK_DART_URL"))
	require.False(t, re.MatchString("BUILDRISK__URL"))
	require.False(t, re.MatchString("XBUILDRISK_DART_URL"))
}

func TestAnchors(t *testing.T) {
	t.Parallel()

	md := "# Operations\n## Deploy: step by step\n### `BuildriskNoLiveWorker`\n" +
		"```sh\n# not a heading\n```\n## Deploy: step by step\n## Restore (PITR), then [re-run](x.md)\n"
	require.Equal(t, map[string]bool{
		"operations":               true,
		"deploy-step-by-step":      true,
		"buildrisknoliveworker":    true,
		"deploy-step-by-step-1":    true,
		"restore-pitr-then-re-run": true,
	}, Anchors(md))
}

// trackedFiles returns the repository's tracked files, relative to root.
func trackedFiles(t *testing.T) []string {
	t.Helper()

	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err, "git ls-files (the test needs a git checkout)")
	var files []string
	for f := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		files = append(files, f)
	}
	require.NotEmpty(t, files)
	return files
}

func readRepoFile(t *testing.T, name string) string {
	t.Helper()

	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	require.NoError(t, err)
	return string(data)
}

// outsideRefs are ways of pointing at documents that are not in the
// repository: the team workspace's design and style pages, the source
// documents (the architecture decision record, its numbered verification
// items, the incident report), and tracker issues by number. Explain a
// reason in the project's own words instead, or point into docs/.
// Each pattern escapes one letter with a character class so that this
// file does not match itself.
var outsideRefs = []*regexp.Regexp{
	regexp.MustCompile(`\.\./share[d]`),
	regexp.MustCompile(`/work/share[d]`),
	regexp.MustCompile(`DESIG[N]\.md`),
	regexp.MustCompile(`DESIG[N] item`),
	regexp.MustCompile(`STYL[E]\.md`),
	regexp.MustCompile(`AD[R]-\d`),
	regexp.MustCompile(`VERIFICATIO[N] \d`),
	regexp.MustCompile(`(?i)post-morte[m]`),
	regexp.MustCompile(`\bseed[s]/`),
	regexp.MustCompile(`\bthe seed[s]\b`),
	regexp.MustCompile(`\bseed['’][s]`),
	regexp.MustCompile(`(?i)\bissue[s]? #?\d+`),
}

// outsideReferences returns the lines of text that refer to a document
// outside the repository, as "line N: text".
func outsideReferences(text string) []string {
	var hits []string
	for i, line := range strings.Split(text, "\n") {
		for _, re := range outsideRefs {
			if re.MatchString(line) {
				hits = append(hits, fmt.Sprintf("line %d: %s", i+1, strings.TrimSpace(line)))
				break
			}
		}
	}
	return hits
}

func TestOutsideReferences(t *testing.T) {
	t.Parallel()

	// The examples carry a ¦ inside the key word, removed before the check,
	// so that this file does not match itself.
	for _, bad := range []string{
		"See ../sha¦red/DESI¦GN.md.",
		"// the bounded fan-out of DESI¦GN item 16",
		"# (AD¦R-012): only the workers do",
		"Restart rule (VERIFICATIO¦N 182)",
		"the post-mor¦tem's fix",
		"the retry rules the see¦ds demand",
		"the see¦d's configuration",
		"Any refusal pages (iss¦ue 6)",
		"package map (STY¦LE.md §2)",
	} {
		bad = strings.ReplaceAll(bad, "¦", "")
		require.NotEmpty(t, outsideReferences(bad), "%q must be caught", bad)
	}
	for _, good := range []string{
		"gradeOf derives corpCode's grade from the seed.",
		"`radar dev` seeds the exposure ledger",
		"see docs/architecture.md, Zero-loss fan-out",
		"the lost-events incident",
	} {
		require.Empty(t, outsideReferences(good), "%q is not an outside reference", good)
	}
}

// No tracked file points at a document outside the repository: a reader
// who clones it must find every reason in it.
func TestNoReferenceOutsideRepository(t *testing.T) {
	t.Parallel()

	for _, name := range trackedFiles(t) {
		if strings.HasSuffix(name, "go.sum") || strings.HasSuffix(name, "package-lock.json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet in the index
		}
		require.NoError(t, err)
		if bytes.IndexByte(data, 0) >= 0 {
			continue // binary
		}
		for _, hit := range outsideReferences(string(data)) {
			t.Errorf("%s refers to a document outside the repository: %s", name, hit)
		}
	}
}

// markdownLinkRE matches inline links and images: [text](target "title").
var markdownLinkRE = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// Every relative link of a tracked Markdown file names a file of the
// repository (never one beside it), and its #anchor, if any, a heading of
// that file.
func TestMarkdownLinksResolve(t *testing.T) {
	t.Parallel()

	files := trackedFiles(t)
	for _, name := range files {
		if !strings.HasSuffix(name, ".md") || strings.Contains(name, "node_modules/") {
			continue
		}
		text := readRepoFile(t, name)
		for _, m := range markdownLinkRE.FindAllStringSubmatch(stripFences(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			resolved := name
			if file != "" {
				resolved = path.Clean(path.Join(path.Dir(name), file))
				if resolved == ".." || strings.HasPrefix(resolved, "../") || path.IsAbs(file) {
					t.Errorf("%s links outside the repository: %s", name, target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(resolved))); err != nil {
					t.Errorf("%s links to a missing %s", name, target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(resolved, ".md") {
				if !Anchors(readRepoFile(t, resolved))[anchor] {
					t.Errorf("%s links to %s, which has no heading #%s", name, resolved, anchor)
				}
			}
		}
	}
}

// stripFences blanks fenced code blocks, whose brackets are not links.
func stripFences(md string) string {
	var b strings.Builder
	fenced := false
	for line := range strings.SplitSeq(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			b.WriteString("\n")
			continue
		}
		if !fenced {
			b.WriteString(line)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// alert is an alert rule of either alerting path, with its annotations.
type alert struct {
	source      string
	name        string
	annotations map[string]string
}

// alerts returns every Prometheus alerting rule and every Grafana-managed
// alert rule under deploy/.
// prometheusRules holds the Prometheus alerts; their runbook_url starts
// with runbookBase, the template of the runbook_base external label
// (prometheus.yml sets it from BUILDRISK_RUNBOOK_URL), so a page links to
// the runbook itself.
const (
	prometheusRules = "deploy/prometheus/rules.yml"
	runbookBase     = "{{ $externalLabels.runbook_base }}"
)

// grafanaRunbookBase starts the Grafana rules' runbook_url: Grafana expands
// BUILDRISK_RUNBOOK_URL in its provisioning files, so a Grafana page links
// to the runbook itself too.
const grafanaRunbookBase = "${BUILDRISK_RUNBOOK_URL}"

func alerts(t *testing.T) []alert {
	t.Helper()

	var all []alert
	var prom struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(readRepoFile(t, prometheusRules)), &prom))
	for _, g := range prom.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" { // recording rules have no runbook
				all = append(all, alert{prometheusRules, r.Alert, r.Annotations})
			}
		}
	}

	grafana, err := filepath.Glob(filepath.Join(root, "deploy", "grafana", "provisioning", "alerting", "*.y*ml"))
	require.NoError(t, err)
	require.NotEmpty(t, grafana)
	for _, file := range grafana {
		var g struct {
			Groups []struct {
				Rules []struct {
					Title       string            `yaml:"title"`
					Annotations map[string]string `yaml:"annotations"`
				} `yaml:"rules"`
			} `yaml:"groups"`
		}
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(data, &g), file)
		rel, _ := filepath.Rel(root, file)
		for _, grp := range g.Groups {
			for _, r := range grp.Rules {
				all = append(all, alert{filepath.ToSlash(rel), r.Title, r.Annotations})
			}
		}
	}
	require.NotEmpty(t, all)
	return all
}

// alertSections returns the alert names that have a runbook section: the
// level-3 headings under operations.md's "Alerts" heading.
func alertSections(t *testing.T) []string {
	t.Helper()

	var names []string
	inAlerts := false
	for line := range strings.SplitSeq(readRepoFile(t, runbook), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			inAlerts = strings.TrimSpace(strings.TrimPrefix(line, "## ")) == "Alerts"
		case inAlerts && strings.HasPrefix(line, "### "):
			names = append(names, strings.Trim(strings.TrimSpace(strings.TrimPrefix(line, "### ")), "`"))
		}
	}
	return names
}

// Every alert of both alerting paths links (annotation runbook_url) to its
// own section of the runbook, and every alert section is an alert's: a
// paged operator lands on the steps for that alert.
func TestAlertsLinkToRunbook(t *testing.T) {
	t.Parallel()

	anchors := Anchors(readRepoFile(t, runbook))
	sections := alertSections(t)
	alerted := map[string]bool{}
	for _, a := range alerts(t) {
		alerted[a.name] = true
		url := a.annotations["runbook_url"]
		want := runbook + "#" + Slug(a.name)
		switch a.source {
		case prometheusRules:
			// Prometheus prefixes the base from BUILDRISK_RUNBOOK_URL.
			want = runbookBase + want
		default:
			want = grafanaRunbookBase + want
		}
		if url != want {
			t.Errorf("%s: alert %s has runbook_url %q, want %q", a.source, a.name, url, want)
			continue
		}
		if !anchors[Slug(a.name)] || !slices.Contains(sections, a.name) {
			t.Errorf("%s: alert %s has no section \"### %s\" under \"## Alerts\" in %s", a.source, a.name, a.name, runbook)
		}
	}
	for _, s := range sections {
		if !alerted[s] {
			t.Errorf("%s has a runbook section for %s, which is no alert", runbook, s)
		}
	}
}

// testNameRE finds test names the documents cite: `TestSomething`.
var testNameRE = regexp.MustCompile("`(Test[A-Za-z0-9_]+)`")

// definedTests returns the name of every top-level func TestX( of the
// repository's tracked *_test.go files.
func definedTests(t *testing.T) map[string]bool {
	t.Helper()

	defined := map[string]bool{}
	funcRE := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	for _, name := range trackedFiles(t) {
		if strings.HasSuffix(name, "_test.go") {
			for _, m := range funcRE.FindAllStringSubmatch(readRepoFile(t, name), -1) {
				defined[m[1]] = true
			}
		}
	}
	require.NotEmpty(t, defined)
	return defined
}

// Every test a document cites as proof of a guarantee exists as a
// func TestX( of a tracked test file, so a renamed or deleted test can't
// leave a claim without its proof. Every tracked Markdown file is read but
// CHANGELOG.md, whose entries are history and stay as they were written.
func TestCitedTestsExist(t *testing.T) {
	t.Parallel()

	defined := definedTests(t)
	cited := 0
	for _, name := range trackedFiles(t) {
		if !strings.HasSuffix(name, ".md") || name == "CHANGELOG.md" || strings.Contains(name, "node_modules/") {
			continue
		}
		for _, m := range testNameRE.FindAllStringSubmatch(readRepoFile(t, name), -1) {
			cited++
			if !defined[m[1]] {
				t.Errorf("%s cites %s, which no test file defines", name, m[1])
			}
		}
	}
	require.NotZero(t, cited, "docs/architecture.md cites the tests behind its guarantees")
}

// readmeAlertRowRE matches a row of the README's alert table: name, what,
// severity.
var readmeAlertRowRE = regexp.MustCompile(`(?m)^\| (Buildrisk[A-Za-z]+) \| .+ \| (critical|warning) \|$`)

// The README's alert table lists exactly the alerts of rules.yml, each with
// its severity, so a new alert cannot be left out of it.
func TestReadmeAlertTable(t *testing.T) {
	t.Parallel()

	var prom struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `yaml:"alert"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(readRepoFile(t, prometheusRules)), &prom))
	want := map[string]string{}
	for _, g := range prom.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				want[r.Alert] = r.Labels["severity"]
			}
		}
	}
	got := map[string]string{}
	for _, m := range readmeAlertRowRE.FindAllStringSubmatch(readRepoFile(t, "README.md"), -1) {
		_, dup := got[m[1]]
		require.False(t, dup, "README.md lists %s twice", m[1])
		got[m[1]] = m[2]
	}
	require.Equal(t, want, got, "README.md's alert table (name and severity) differs from deploy/prometheus/rules.yml")
}

// Every table the migrations create is named in the architecture page's
// data model, so a reader learns of each one there, and every migration
// file the page names exists.
func TestArchitectureNamesEveryTable(t *testing.T) {
	t.Parallel()
	page := readRepoFile(t, "docs/architecture.md")
	files, err := filepath.Glob(filepath.Join(root, "sql", "migrations", "goose", "*.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	named := regexp.MustCompile("`([0-9]{5}_[a-z_]+\\.sql)`")
	for _, m := range named.FindAllStringSubmatch(page, -1) {
		if !slices.ContainsFunc(files, func(f string) bool { return filepath.Base(f) == m[1] }) {
			t.Errorf("docs/architecture.md names the migration %s, which sql/migrations/goose does not hold", m[1])
		}
	}
	create := regexp.MustCompile(`(?m)^CREATE (?:UNLOGGED )?TABLE (?:IF NOT EXISTS )?([a-z_]+)`)
	for _, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, m := range create.FindAllStringSubmatch(string(data), -1) {
			if !strings.Contains(page, "`"+m[1]+"`") {
				t.Errorf("docs/architecture.md does not name the table %s (%s)", m[1], filepath.Base(file))
			}
		}
	}
}

// architecture is the page whose every mechanism names the test proving it.
const architecture = "docs/architecture.md"

// citationRE matches a citation, the one form in which architecture.md
// names a test: "proved by" (or "Proved by") and one or more test names in
// backticks, separated by ", " or " and ", each optionally followed by a
// short note in parentheses (no parentheses inside it). It is matched
// against text whose whitespace runs are collapsed to single spaces, so a
// citation may wrap.
var citationRE = regexp.MustCompile("[Pp]roved by `Test[A-Za-z0-9_]+`(?: \\([^()]*\\))?" +
	"(?:(?:,? and |, )`Test[A-Za-z0-9_]+`(?: \\([^()]*\\))?)*")

// collapse replaces every run of whitespace by one space.
func collapse(s string) string { return strings.Join(strings.Fields(s), " ") }

// citedTests returns the test names of text's citations.
func citedTests(text string) []string {
	var names []string
	for _, c := range citationRE.FindAllString(collapse(text), -1) {
		for _, m := range testNameRE.FindAllStringSubmatch(c, -1) {
			names = append(names, m[1])
		}
	}
	return names
}

// uncitedTestNames returns the test names of text that stand outside any
// citation: a test named some other way than "proved by".
func uncitedTestNames(text string) []string {
	text = collapse(text)
	spans := citationRE.FindAllStringIndex(text, -1)
	var outside []string
	for _, m := range testNameRE.FindAllStringSubmatchIndex(text, -1) {
		inside := slices.ContainsFunc(spans, func(s []int) bool { return s[0] <= m[0] && m[1] <= s[1] })
		if !inside {
			outside = append(outside, text[m[2]:m[3]])
		}
	}
	return outside
}

// section is a "##" or "###" heading of a Markdown page and the lines up to
// the next one, code fences included.
type section struct {
	level   int // 2 or 3
	heading string
	parent  string // the "##" heading a "###" section is under
	line    int    // 1-based line of the heading
	body    []string
}

// sections splits markdown at its "##" and "###" headings outside code
// fences; the text before the first one is not a section.
func sections(markdown string) []*section {
	var all []*section
	var cur *section
	parent := ""
	fenced := false
	for i, line := range strings.Split(markdown, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		level := 0
		switch {
		case !fenced && strings.HasPrefix(line, "## "):
			level = 2
		case !fenced && strings.HasPrefix(line, "### "):
			level = 3
		}
		if level == 0 {
			if cur != nil {
				cur.body = append(cur.body, line)
			}
			continue
		}
		heading := strings.TrimSpace(line[level+1:])
		if level == 2 {
			parent = heading
		}
		cur = &section{level: level, heading: heading, parent: parent, line: i + 1}
		if level == 2 {
			cur.parent = ""
		}
		all = append(all, cur)
	}
	return all
}

// unit is one statement-sized block of a section's body: a paragraph, a
// list item with its continuation lines, a table row, or a code fence.
type unit struct {
	line int // 1-based line within the body
	text string
}

// units splits a section's body into units. A table's header row and its
// separator row are not units, and neither is a paragraph ending in ":",
// which only leads into the list, table or fence after it.
func units(body []string) []unit {
	var all []unit
	var cur *unit
	kind := "" // of cur: "prose", "item", "row", "fence"
	inTable := false
	flush := func() {
		if cur != nil {
			text := strings.TrimSpace(cur.text)
			if !(kind == "prose" && strings.HasSuffix(text, ":")) {
				all = append(all, unit{cur.line, text})
			}
		}
		cur, kind = nil, ""
	}
	start := func(i int, k, line string) {
		flush()
		cur, kind = &unit{line: i + 1, text: line}, k
	}
	for i, line := range body {
		trimmed := strings.TrimSpace(line)
		switch {
		case kind == "fence":
			cur.text += "\n" + line
			if strings.HasPrefix(trimmed, "```") {
				flush()
			}
		case strings.HasPrefix(trimmed, "```"):
			start(i, "fence", line)
			inTable = false
		case trimmed == "":
			flush()
			inTable = false
		case strings.HasPrefix(trimmed, "|"):
			if !inTable || strings.HasPrefix(trimmed, "|---") || strings.HasPrefix(trimmed, "| ---") {
				flush() // the header row, or the separator under it
				inTable = true
				continue
			}
			start(i, "row", line)
		case strings.HasPrefix(line, "- ") || strings.HasPrefix(line, "* "):
			start(i, "item", line)
		case cur == nil || kind == "row":
			start(i, "prose", line)
		default:
			cur.text += "\n" + line
		}
	}
	flush()
	return all
}

// guarantees is the architecture page's "##" section whose "###" sections
// are the service's promises, one mechanism each.
const guarantees = "Guarantees and their mechanisms"

// descriptiveSections are the "##" sections of the architecture page that
// state no mechanism, and so need no citation: the failures the design
// answers (history), and the data model (a glossary of the tables, which
// TestArchitectureNamesEveryTable keeps complete). The guarantees' own
// heading holds only its "###" sections.
var descriptiveSections = []string{"Background: the failures this design answers", "Data model", guarantees}

// Every mechanism the architecture page claims names the test that proves
// it, and in one form, "proved by `TestX`" (citationRE), which
// TestCitedTestsExist then checks against the tests that exist.
//
// What counts as a mechanism claim, mechanically:
//   - under "## Guarantees and their mechanisms", every unit of every "###"
//     section: each paragraph, each list item and each table row (units);
//     a paragraph ending in ":" only introduces what follows it and is
//     exempt;
//   - every other "##" or "###" section (the roles, the package map, the
//     path of a request) carries at least one citation, unless
//     descriptiveSections lists it.
//
// A test named outside a citation fails too, so the page names tests in
// one way only.
func TestArchitectureCitesItsProofs(t *testing.T) {
	t.Parallel()

	page := readRepoFile(t, architecture)
	checkArchitectureCitations(t, page)
	require.NotEmpty(t, citedTests(page))
}

// checkArchitectureCitations reports, on t, every claim of page that lacks a
// citation and every test page names outside one.
func checkArchitectureCitations(t testing.TB, page string) {
	t.Helper()

	for _, name := range uncitedTestNames(page) {
		t.Errorf("%s names %s outside a citation: write \"proved by `%s`\"", architecture, name, name)
	}
	headings := map[string]bool{}
	for _, s := range sections(page) {
		headings[s.heading] = true
		switch {
		case s.level == 3 && s.parent == guarantees:
			for _, u := range units(s.body) {
				if len(citedTests(u.text)) == 0 {
					first, _, _ := strings.Cut(u.text, "\n")
					t.Errorf("%s, %q line %d: a claim without a citation (\"proved by `TestX`\"): %s",
						architecture, s.heading, s.line+u.line, first)
				}
			}
		case slices.Contains(descriptiveSections, s.heading) || slices.Contains(descriptiveSections, s.parent):
		default:
			if len(citedTests(strings.Join(s.body, "\n"))) == 0 {
				t.Errorf("%s, section %q (line %d) cites no test (\"proved by `TestX`\")", architecture, s.heading, s.line)
			}
		}
	}
	for _, h := range descriptiveSections {
		if !headings[h] {
			t.Errorf("descriptiveSections lists %q, which is no heading of %s", h, architecture)
		}
	}
}

// errorRecorder is a testing.TB that keeps the errors of a check run on a
// made-up page.
type errorRecorder struct {
	testing.TB
	errs []string
}

func (r *errorRecorder) Helper() {}

func (r *errorRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// The citation rules on made-up pages: what a citation is, and each way a
// page can break them.
func TestArchitectureCitationRules(t *testing.T) {
	t.Parallel()

	require.Equal(t, []string{"TestA", "TestB", "TestC"},
		citedTests("holds (proved by `TestA` (a note), `TestB` and\n`TestC`)."))
	require.Equal(t, []string{"TestD"}, uncitedTestNames("Tests: `TestD`. Proved by `TestE`; proved by `TestF`."))

	heads := "## Background: the failures this design answers\n\nhistory\n\n## Data model\n\n| table | holds |\n|---|---|\n| `t` | rows |\n\n"
	good := heads + "## Roles\n\n| role | does |\n|---|---|\n| `api` | serves (proved by `TestR`) |\n| `cli` | runs |\n\n" +
		"## " + guarantees + "\n\n### One\n\nA lead-in:\n\n- a bullet (proved by `TestA`)\n- another, proved by `TestB`\n\n" +
		"| write | proof |\n|---|---|\n| x | proved by `TestC` |\n\n```\ncode (proved by `TestD`)\n```\n"
	rec := &errorRecorder{TB: t}
	checkArchitectureCitations(rec, good)
	require.Empty(t, rec.errs)

	for _, bad := range []string{
		strings.Replace(good, " (proved by `TestR`)", "", 1),                     // a section without a citation
		strings.Replace(good, "- another, proved by `TestB`", "- another", 1),    // a bullet without one
		strings.Replace(good, "| x | proved by `TestC` |", "| x | `TestC` |", 1), // a row, and a name outside
		strings.Replace(good, "## Data model", "## Data", 1),                     // an exemption that names no heading
		good + "\nA last paragraph.\n",
	} {
		rec := &errorRecorder{TB: t}
		checkArchitectureCitations(rec, bad)
		require.NotEmpty(t, rec.errs, "must fail:\n%s", bad)
	}
}

// benchmarksMaxLines bounds BENCHMARKS.md: the current table and how it is
// measured. Past figures belong in commit messages and the changelog.
const benchmarksMaxLines = 150

func TestBenchmarksStaySmall(t *testing.T) {
	t.Parallel()

	text := readRepoFile(t, "BENCHMARKS.md")
	lines := strings.Count(strings.TrimSuffix(text, "\n"), "\n") + 1
	require.LessOrEqual(t, lines, benchmarksMaxLines,
		"BENCHMARKS.md holds the current figures and their method only; move past readings to commit messages")
	require.Contains(t, text, "<!-- make bench: begin -->", "the table `make bench` writes")
}

// The README's walk-through reads the fake upstream's address from the
// file `radar dev` writes, as it reads the token, and never names dev's
// default address: a second user on the machine, whose fake listens
// elsewhere (BUILDRISK_DEV_FAKE_ADDR), would reconfigure the first's.
func TestReadmeWalkthroughReadsTheFakesAddress(t *testing.T) {
	t.Parallel()

	readme := readRepoFile(t, "README.md")
	require.False(t, strings.Contains(readme, "127.0.0.1:8090"), "README.md names dev's default fake address 127.0.0.1:8090")
	for _, want := range []string{"FAKE=$(cat .radar/dev-fake-url)", "$FAKE/__fake/config", "$FAKE/__fake/stats"} {
		require.True(t, strings.Contains(readme, want), "README.md's walk-through lacks %q", want)
	}
}
