package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDockerfile(t *testing.T) {
	t.Parallel()

	data, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	text := string(data)

	var froms []string
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, "FROM ") {
			froms = append(froms, line)
		}
	}
	require.Len(t, froms, 2, "multi-stage: build and runtime")
	// The build stage uses the Go that go.mod names, so the image is built with
	// the same toolchain (and the same standard-library fixes) as CI.
	goMod, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	goLine := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(string(goMod))
	require.NotNil(t, goLine, "go.mod has a go line")
	require.True(t, strings.HasPrefix(froms[0], "FROM golang:"+goLine[1]+"-"), "%s does not use go %s", froms[0], goLine[1])
	require.Contains(t, text, "./cmd/radar")
	require.Contains(t, text, "-X main.version=")
	require.Contains(t, text, `ENTRYPOINT ["radar"]`)
	require.FileExists(t, "Dockerfile.dockerignore")
}

// shellWords splits s the way a shell splits a command line of plain words
// and double-quoted strings (all the Makefile and Dockerfile use).
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
			inWord = true
		case !quoted && (r == ' ' || r == '\t'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// makeVariable returns the value of a `NAME = value` line of the Makefile.
func makeVariable(t *testing.T, makefile, name string) string {
	t.Helper()

	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*[:?]?=\s*(.*)$`).FindStringSubmatch(makefile)
	require.NotNil(t, m, "the Makefile sets no %s", name)
	return strings.TrimSpace(m[1])
}

// The image is built with the flags CI builds with: the Dockerfile's build
// environment and `go build` flags equal the Makefile's BUILD_ENV and
// BUILD_FLAGS, which `make build` (run by .ci/run) uses.
func TestDockerfileBuildsLikeMakefile(t *testing.T) {
	t.Parallel()

	mk, err := os.ReadFile("../Makefile")
	require.NoError(t, err)
	makefile := string(mk)
	require.Regexp(t, `(?m)^build:\n\t\$\(BUILD_ENV\) \$\(GO\) build \$\(BUILD_VERBOSE\) \$\(BUILD_FLAGS\) -o bin/radar \./cmd/radar$`, makefile,
		"make build uses BUILD_ENV and BUILD_FLAGS")
	wantEnv := shellWords(makeVariable(t, makefile, "BUILD_ENV"))
	wantFlags := shellWords(makeVariable(t, makefile, "BUILD_FLAGS"))

	df, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	// Join continuation lines, then read the build stage's ENV and go build.
	dockerfile := strings.ReplaceAll(string(df), "\\\n", " ")
	var gotEnv, gotFlags []string
	for line := range strings.SplitSeq(dockerfile, "\n") {
		if rest, ok := strings.CutPrefix(line, "ENV "); ok {
			gotEnv = append(gotEnv, shellWords(rest)...)
		}
		if _, build, ok := strings.Cut(line, " go build "); ok {
			require.Nil(t, gotFlags, "one go build in the Dockerfile")
			flags, _, ok := strings.Cut(build, " -o ")
			require.True(t, ok, "go build ... -o OUT")
			gotFlags = shellWords(strings.ReplaceAll(flags, "${VERSION}", "$(VERSION)"))
		}
	}
	require.NotNil(t, gotFlags, "the Dockerfile runs go build")
	require.ElementsMatch(t, wantEnv, gotEnv, "the Dockerfile's ENV and the Makefile's BUILD_ENV")
	require.Equal(t, wantFlags, gotFlags, "the Dockerfile's go build flags and the Makefile's BUILD_FLAGS")
}

func TestShellWords(t *testing.T) {
	t.Parallel()

	require.Equal(t, []string{"-trimpath", "-ldflags", "-s -w -X main.version=$(VERSION)", "x"},
		shellWords(` -trimpath  -ldflags "-s -w -X main.version=$(VERSION)" x`))
}
