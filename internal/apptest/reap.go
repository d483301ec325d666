package apptest

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var AdminAddrLine = regexp.MustCompile(`worker running.*admin_addr=(\S+)`)

// SeedExposure puts n companies of the fake universe in the exposure ledger.
func (s *System) SeedExposure(n int) {
	s.T.Helper()
	for i, c := range s.Fake.Companies()[:n] {
		_, err := s.Pool.Exec(context.Background(), `INSERT INTO exposure (corp_code, outstanding_krw) VALUES ($1, $2)`, c.CorpCode, 1_000_000+i)
		require.NoError(s.T, err)
	}
}

// WaitHeldBy waits until request id is RUNNING and returns its worker id.
func (s *System) WaitHeldBy(id string) string {
	s.T.Helper()
	out := s.WaitRequest(id, "RUNNING")
	return out["workerId"].(string)
}

func Scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// MetricLine returns the value of the first sample of name with all the
// given label pairs in a Prometheus text exposition.
func MetricLine(exposition, name string, labels ...string) (float64, bool) {
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(line, l)
		}
		if !match {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		return v, err == nil
	}
	return 0, false
}

func (s *System) RequestStatusByWorker(workerID string) string {
	s.T.Helper()
	var status string
	require.NoError(s.T, s.Pool.QueryRow(context.Background(), `SELECT status FROM job_request WHERE worker_id = $1`, workerID).Scan(&status))
	return status
}
