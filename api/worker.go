package api

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/buildrisk/radar/queries"
)

// WorkerView is one registered worker.
type WorkerView struct {
	ID               string    `json:"id" doc:"pid@hostname#boot"`
	Hostname         string    `json:"hostname"`
	PID              int32     `json:"pid"`
	StartedAt        time.Time `json:"startedAt"`
	HeartbeatAt      time.Time `json:"heartbeatAt"`
	Alive            bool      `json:"alive" doc:"heartbeat within the stale window and not stopped"`
	Status           string    `json:"status" enum:"running,draining,stopped"`
	Version          string    `json:"version"`
	ConfiguredKeys   []string  `json:"configuredKeys" doc:"names of the provider keys the worker holds, never their values"`
	ActiveRequestIDs []string  `json:"activeRequestIds"`
}

// WorkerListOutput is GET /v1/workers.
type WorkerListOutput struct {
	Body struct {
		Workers []*WorkerView `json:"workers"`
	}
}

// alive is the registry's rule for a live worker: not stopped, and a
// heartbeat within the stale window (the reaper's SQL uses the same rule).
func (s *Server) alive(w *queries.Worker) bool {
	return w.Status != "stopped" && time.Since(w.HeartbeatAt) < s.cfg.StaleAfter
}

func (s *Server) registerWorkers(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "worker-list",
		Method:      http.MethodGet,
		Path:        "/v1/workers",
		Summary:     "List registered workers and what they hold",
		Tags:        []string{"workers"},
		Security:    []map[string][]string{{"bearer": {}}},
	}, func(ctx context.Context, _ *struct{}) (*WorkerListOutput, error) {
		rows, err := s.queries.WorkerList(ctx, s.pool)
		if err != nil {
			return nil, s.problemFrom(ctx, err)
		}
		active, err := s.queries.JobRequestActiveIDsByWorker(ctx, s.pool)
		if err != nil {
			return nil, s.problemFrom(ctx, err)
		}
		held := map[string][]string{}
		for _, a := range active {
			for _, id := range a.RequestIds {
				held[a.WorkerID] = append(held[a.WorkerID], formatID(id))
			}
		}
		out := &WorkerListOutput{}
		out.Body.Workers = make([]*WorkerView, 0, len(rows))
		for _, w := range rows {
			ids := held[w.ID]
			if ids == nil {
				ids = []string{}
			}
			out.Body.Workers = append(out.Body.Workers, &WorkerView{
				ID: w.ID, Hostname: w.Hostname, PID: w.Pid, StartedAt: w.StartedAt, HeartbeatAt: w.HeartbeatAt,
				Alive:  s.alive(w),
				Status: w.Status, Version: w.Version, ConfiguredKeys: w.ConfiguredKeys, ActiveRequestIDs: ids,
			})
		}
		return out, nil
	})
}
