package observability

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://h/p?DEAL_YMD=202501&serviceKey=abc%2B%3D&LAWD_CD=11110": "http://h/p?DEAL_YMD=202501&serviceKey=REDACTED&LAWD_CD=11110",
		`Get "http://h/api/list.json?crtfc_key=k1": EOF`:                `Get "http://h/api/list.json?crtfc_key=REDACTED": EOF`,
		"https://h/credit/v1/grades?APIKEY=s3cr3t#frag":                 "https://h/credit/v1/grades?APIKEY=REDACTED#frag",
		"q=1&api_key=x y&access_token=t":                                "q=1&api_key=REDACTED y&access_token=REDACTED",
		"Authorization: Bearer op-token-1":                              "Authorization: Bearer REDACTED",
		"X-Api-Key: k-9 next":                                           "X-Api-Key: REDACTED next",
		"nothing secret here: key=value monkey=1":                       "nothing secret here: key=value monkey=1",
	} {
		require.Equal(t, want, Redact(in), in)
	}
}

func TestRedactHeader(t *testing.T) {
	t.Parallel()
	h := http.Header{"Authorization": {"Bearer t"}, "X-Api-Key": {"k"}, "Accept": {"*/*"}}
	out := RedactHeader(h)
	require.Equal(t, Redacted, out.Get("Authorization"))
	require.Equal(t, Redacted, out.Get("X-Api-Key"))
	require.Equal(t, "*/*", out.Get("Accept"))
	require.Equal(t, "Bearer t", h.Get("Authorization"), "the original is untouched")
}

// Every log line goes through Redact: message, string, error and URL values.
func TestNewLogger_Redacts(t *testing.T) {
	t.Parallel()
	for _, format := range []string{LogFormatJSON, LogFormatText} {
		var buf bytes.Buffer
		logger := NewLogger(&buf, format, slog.LevelInfo)
		u, _ := url.Parse("http://h/p?serviceKey=urlsecret")
		logger.With(slog.String("base", "crtfc_key=withsecret")).WithGroup("g").Info("calling http://h/?apiKey=msgsecret",
			slog.String("url", "http://h/?serviceKey=strsecret"),
			slog.Any("error", errors.New(`Get "http://h/?crtfc_key=errsecret": EOF`)),
			slog.Any("u", u))
		out := buf.String()
		for _, secret := range []string{"urlsecret", "withsecret", "msgsecret", "strsecret", "errsecret"} {
			require.NotContains(t, out, secret, format)
		}
		require.Contains(t, out, Redacted)
	}
}
