// Package docs holds buildrisk-radar's documentation and the tests that keep
// it true:
//
//   - architecture.md: the package map, the path of a request, and the
//     guarantees with the mechanism behind each.
//   - configuration.md: every environment variable, its default and
//     meaning. cmd/radar's configuration test compares its tables with the
//     variables the code reads; deploy's tests check the deploy files set
//     only variables it lists.
//   - operations.md: deploy, scale, upgrade, restore, and a runbook section
//     per alert. docs_test.go checks that every Prometheus and Grafana alert
//     links to its section.
//
// docs_test.go also fails when a tracked file refers to a document outside
// the repository, or a Markdown link inside it points nowhere.
package docs

import (
	"regexp"
	"strconv"
	"strings"
)

// Variable is one row of configuration.md's tables. Name may hold a
// placeholder in angle brackets (BUILDRISK_KEY_<P>) standing for a family of
// variables.
type Variable struct {
	Name    string
	Default string
	Meaning string
}

// variableRowRE matches a table row whose first cell is a variable name in
// backticks: upper-case letters, digits, underscores and placeholders.
var variableRowRE = regexp.MustCompile("^\\|\\s*`([A-Z][A-Z0-9_]*(?:<[A-Z]+>[A-Z0-9_]*)*)`\\s*\\|")

// Variables returns the variables listed in the tables of a configuration
// document (configuration.md), in order of appearance.
func Variables(markdown string) []Variable {
	var vars []Variable
	for line := range strings.SplitSeq(markdown, "\n") {
		m := variableRowRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		v := Variable{Name: m[1]}
		if len(cells) > 1 {
			v.Default = strings.TrimSpace(cells[1])
		}
		if len(cells) > 2 {
			v.Meaning = strings.TrimSpace(strings.Join(cells[2:], "|"))
		}
		vars = append(vars, v)
	}
	return vars
}

// placeholderRE matches a placeholder of a variable family: <P>, <JOB>.
var placeholderRE = regexp.MustCompile(`<([A-Z]+)>`)

// Placeholders returns the placeholders in name, without their brackets.
func Placeholders(name string) []string {
	var names []string
	for _, m := range placeholderRE.FindAllStringSubmatch(name, -1) {
		names = append(names, m[1])
	}
	return names
}

// Expand returns the concrete names of name, each placeholder replaced by
// each of its values in turn. A name without placeholders is returned as
// is. ok is false when values lacks one of name's placeholders.
func Expand(name string, values map[string][]string) (names []string, ok bool) {
	loc := placeholderRE.FindStringSubmatchIndex(name)
	if loc == nil {
		return []string{name}, true
	}
	vals, ok := values[name[loc[2]:loc[3]]]
	if !ok {
		return nil, false
	}
	for _, v := range vals {
		rest, ok := Expand(name[:loc[0]]+v+name[loc[1]:], values)
		if !ok {
			return nil, false
		}
		names = append(names, rest...)
	}
	return names, true
}

// Pattern returns a regular expression matching every name of the family
// name: each placeholder matches one or more upper-case letters, digits or
// underscores.
func Pattern(name string) *regexp.Regexp {
	parts := placeholderRE.Split(name, -1)
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, "[A-Z0-9_]+") + "$")
}

// Slug returns the anchor a Markdown renderer (GitHub's) gives a heading:
// lower case, spaces as hyphens, punctuation other than hyphens and
// underscores dropped.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// headingRE matches an ATX heading: #, ##, ... then its text.
var headingRE = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)

// Anchors returns the anchors of markdown's headings (outside fenced code
// blocks), with GitHub's -1, -2 suffixes for repeated headings.
func Anchors(markdown string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for line := range strings.SplitSeq(markdown, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := Slug(stripInlineMarkup(m[2]))
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// inlineLinkRE matches an inline link [text](target).
var inlineLinkRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// stripInlineMarkup removes code spans' backticks and links' targets from a
// heading, as a renderer does before making its anchor.
func stripInlineMarkup(s string) string {
	return strings.ReplaceAll(inlineLinkRE.ReplaceAllString(s, "$1"), "`", "")
}
