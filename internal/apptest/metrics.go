package apptest

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func (s *System) ScrapeAPI() string {
	s.T.Helper()
	resp, err := http.Get(s.API.URL + "/metrics")
	require.NoError(s.T, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

func RequireMetric(t *testing.T, exposition, name string, want float64, labels ...string) {
	t.Helper()
	got, ok := MetricLine(exposition, name, labels...)
	require.True(t, ok, "%s%v not exported", name, labels)
	require.Equal(t, want, got, "%s%v", name, labels)
}
