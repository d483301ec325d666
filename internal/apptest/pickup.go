package apptest

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// WaitClaimed polls a request until a worker has claimed it.
func WaitClaimed(t *testing.T, s *System, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, out := s.Get("/v1/requests/" + id)
		require.Equal(t, http.StatusOK, status)
		if out["status"] != "QUEUED" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("request %s was not claimed without the poll: %v", id, out)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
