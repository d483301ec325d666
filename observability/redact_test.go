package observability

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
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

// Secrets finds a configured value bare, in every encoding a message may
// carry it, whatever the ASCII case of its percent-encoding, and before
// the name=value rule cuts it at a '&'.
func TestSecrets_Redact(t *testing.T) {
	t.Parallel()
	const key = "KEYCANARY+dart/9b&21=="
	secrets := NewSecrets(key, "", "other-key")
	for _, form := range []string{
		key,
		url.QueryEscape(key), url.PathEscape(key),
		strings.ToLower(url.QueryEscape(key)),
		url.QueryEscape(url.QueryEscape(key)),
		`KEYCANARY+dart/9b\u002621==`, // JSON-escaped
		"KEYCANARY+dart/9b&amp;21==",  // HTML-escaped
		base64.StdEncoding.EncodeToString([]byte(key)), base64.RawURLEncoding.EncodeToString([]byte(key)),
	} {
		got := secrets.Redact("unregistered key " + form + " (/api/list.json?corp_code=1&crtfc_key=" + form + ")")
		require.NotContains(t, got, "KEYCANARY", form)
		require.NotContains(t, got, "21", form)
		require.Contains(t, got, "unregistered key "+Redacted, form)
	}
	require.Equal(t, "key other-"+Redacted+"-x", secrets.Redact("key other-other-key-x"))
	require.Equal(t, "crtfc_key="+Redacted, secrets.Redact("crtfc_key=unknown"), "the name=value rule still applies")
	var none *Secrets
	require.Equal(t, "apiKey="+Redacted+" KEYCANARY", none.Redact("apiKey=x KEYCANARY"))

	err := fmt.Errorf("chunk 1: %w", &url.Error{Op: "Get", URL: "/x?k=" + key, Err: io.EOF})
	redacted := secrets.RedactError(err)
	require.NotContains(t, redacted.Error(), "KEYCANARY")
	require.ErrorIs(t, redacted, io.EOF, "the cause is still seen")
	require.Same(t, redacted, secrets.RedactError(redacted), "not wrapped twice")
	require.NoError(t, secrets.RedactError(nil))
}

// A logger wrapped by Secrets.Handler quotes no secret value in its
// message, attributes, groups or the attributes it was made with.
func TestSecrets_Handler(t *testing.T) {
	t.Parallel()
	const key = "KEYCANARYlog%Secret"
	var buf bytes.Buffer
	logger := slog.New(NewSecrets(key).Handler(NewLogger(&buf, LogFormatJSON, slog.LevelInfo).Handler()))
	logger.With(slog.String("with", "a "+key)).WithGroup("g").Info("refused: "+key,
		slog.String("s", url.QueryEscape(key)),
		slog.Any("error", errors.New("unregistered key "+key)),
		slog.Group("inner", slog.String("deep", key)))
	require.NotContains(t, buf.String(), "KEYCANARY")
	require.Contains(t, buf.String(), `"msg":"refused: REDACTED"`)
	require.Equal(t, slog.Default().Handler(), NewSecrets().Handler(slog.Default().Handler()), "nothing to redact: unwrapped")
}
