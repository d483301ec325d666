package api

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
	"github.com/buildrisk/radar/radartype"
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

// Page sizes of GET /v1/workers.
const (
	WorkerListLimitDefault = 50
	WorkerListLimitMax     = 500
)

type workerListInput struct {
	Limit  string `query:"limit" doc:"page size, 1..500 (default 50)"`
	Cursor string `query:"cursor" doc:"nextCursor of the previous page"`
}

// WorkerListOutput is GET /v1/workers.
type WorkerListOutput struct {
	Body struct {
		Workers    []*WorkerView `json:"workers"`
		NextCursor *string       `json:"nextCursor" doc:"pass as cursor for the next page; null on the last page"`
	}
}

// workerCursor is the position after a worker in the list (newest started
// first): its start time and id, opaque to clients.
func workerCursor(w *queries.Worker) string {
	return base64.RawURLEncoding.EncodeToString([]byte(w.StartedAt.UTC().Format(time.RFC3339Nano) + "|" + w.ID))
}

func parseWorkerCursor(s string) (time.Time, string, bool) {
	raw, ok := decodeCursor(s)
	if !ok {
		return time.Time{}, "", false
	}
	at, id, ok := strings.Cut(raw, "|")
	if !ok || id == "" {
		return time.Time{}, "", false
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return time.Time{}, "", false
	}
	return t, id, true
}

// alive is the registry's rule for a live worker: not stopped, and a
// heartbeat within the stale window (the reaper's SQL uses the same rule).
func (s *Server) alive(w *queries.Worker) bool {
	return w.Status != string(radartype.WorkerStopped) && time.Since(w.HeartbeatAt) < s.cfg.StaleAfter
}

func (s *Server) registerWorkers(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "worker-list",
		Method:      http.MethodGet,
		Path:        "/v1/workers",
		Summary:     "List registered workers and what they hold",
		Tags:        []string{"workers"},
		Security:    []map[string][]string{{"bearer": {}}},
	}, func(ctx context.Context, in *workerListInput) (*WorkerListOutput, error) {
		params := &queries.WorkerListParams{MaxRows: WorkerListLimitDefault}
		if in.Limit != "" {
			limit, err := strconv.Atoi(in.Limit)
			if err != nil || limit < 1 || limit > WorkerListLimitMax {
				return nil, badQuery("limit", fmt.Sprintf("%s is not an integer from 1 to %d", catalog.Quote(in.Limit), WorkerListLimitMax))
			}
			params.MaxRows = int32(limit)
		}
		if in.Cursor != "" {
			at, id, ok := parseWorkerCursor(in.Cursor)
			if !ok {
				return nil, badQuery("cursor", "not a cursor returned by this API")
			}
			params.BeforeStartedAt, params.BeforeID = &at, &id
		}
		rows, err := s.queries.WorkerList(ctx, s.reads, params)
		if err != nil {
			return nil, s.problemFrom(ctx, err)
		}
		active, err := s.queries.JobRequestActiveIDsByWorker(ctx, s.reads)
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
		if len(rows) == int(params.MaxRows) {
			cursor := workerCursor(rows[len(rows)-1])
			out.Body.NextCursor = &cursor
		}
		return out, nil
	})
}
