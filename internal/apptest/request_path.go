package apptest

import (
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// PostBurst sends posts concurrent POSTs of body to the aptTrade requests
// endpoint, released together, and checks the database decided: exactly one
// 202, every other answer a 409 naming it. It returns the accepted id.
func (s *System) PostBurst(t *testing.T, body string, posts int) string {
	t.Helper()
	start := make(chan struct{})
	type answer struct {
		status int
		out    map[string]any
	}
	answers := make(chan answer, posts)
	var wg sync.WaitGroup
	for range posts {
		wg.Go(func() {
			<-start
			status, out := s.Post("/v1/jobs/aptTrade/requests", body)
			answers <- answer{status, out}
		})
	}
	close(start)
	wg.Wait()
	close(answers)
	var accepted []string
	active := map[any]int{}
	for a := range answers {
		switch a.status {
		case http.StatusAccepted:
			accepted = append(accepted, a.out["requestId"].(string))
		case http.StatusConflict:
			active[a.out["activeRequestId"]]++
		default:
			t.Fatalf("unexpected answer %d: %v", a.status, a.out)
		}
	}
	require.Len(t, accepted, 1)
	require.Equal(t, map[any]int{accepted[0]: posts - 1}, active)
	return accepted[0]
}
