package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/buildrisk/radar/queries"
)

// ProviderView is one provider's call budget for today.
type ProviderView struct {
	Provider  string   `json:"provider"`
	Jobs      []string `json:"jobs" doc:"the jobs that call this provider"`
	Day       string   `json:"day" doc:"the budget day, YYYY-MM-DD in BUILDRISK_TIMEZONE"`
	DailyCap  *int     `json:"dailyCap" doc:"calls allowed per day, as the live workers enforce it (the highest when they disagree: calls go on until it); null when the provider has no cap"`
	CapSource string   `json:"capSource" enum:"workers,api" doc:"workers: dailyCap is the cap the live workers recorded in the registry; api: no live worker reported one, so dailyCap is the api's own BUILDRISK_DAILY_CAP_<P>"`
	// CapReportedBy and CapsByWorker are set only when live workers
	// enforce different caps.
	CapReportedBy string           `json:"capReportedBy,omitempty" doc:"when live workers disagree: the worker whose cap dailyCap is"`
	CapsByWorker  []*WorkerCapView `json:"capsByWorker,omitempty" doc:"when live workers disagree: the cap each live worker enforces, newest worker first"`
	UsedToday     int              `json:"usedToday" doc:"calls spent today by every worker together"`
	Used          int              `json:"used" doc:"the same as usedToday: calls spent in the budget day"`
	Cap           *int             `json:"cap" doc:"the same as dailyCap"`
	Remaining     *int             `json:"remaining" doc:"calls left today under dailyCap; null when the provider has no cap"`
	ResetsAt      time.Time        `json:"resetsAt" doc:"when the budget day ends and the used calls start again from 0: the next midnight in BUILDRISK_TIMEZONE; a run stopped by the cap resumes then when cap is in BUILDRISK_AUTO_RESUME"`
}

// WorkerCapView is the daily cap one live worker enforces for a provider.
type WorkerCapView struct {
	WorkerID string `json:"workerId"`
	DailyCap int    `json:"dailyCap"`
}

// Cap sources of ProviderView.CapSource.
const (
	capSourceAPI     = "api"
	capSourceWorkers = "workers"
)

// workerCaps reads the daily caps the live workers recorded, per provider,
// newest worker first.
func (s *Server) workerCaps(ctx context.Context) (map[string][]*WorkerCapView, error) {
	rows, err := s.queries.WorkerDailyCapsAlive(ctx, s.reads, s.cfg.StaleAfter.Seconds())
	if err != nil {
		return nil, err
	}
	out := map[string][]*WorkerCapView{}
	for _, row := range rows {
		var caps map[string]int
		if err := json.Unmarshal(row.DailyCaps, &caps); err != nil {
			s.cfg.Logger.WarnContext(ctx, "unreadable daily caps on a worker row", slog.String("worker_id", row.ID), slog.String("error", err.Error()))
			continue
		}
		for p, c := range caps {
			out[p] = append(out[p], &WorkerCapView{WorkerID: row.ID, DailyCap: c})
		}
	}
	return out, nil
}

// providerCap fills view's cap from the live workers' caps, or from the
// api's own configuration when no live worker reported one.
func (s *Server) providerCap(view *ProviderView, reported []*WorkerCapView) {
	if len(reported) == 0 {
		view.CapSource = capSourceAPI
		if limit, ok := s.cfg.DailyCaps[view.Provider]; ok {
			view.DailyCap = &limit
		}
		return
	}
	view.CapSource = capSourceWorkers
	highest := reported[0]
	agree := true
	for _, r := range reported[1:] {
		agree = agree && r.DailyCap == highest.DailyCap
		if r.DailyCap > highest.DailyCap {
			highest = r
		}
	}
	limit := highest.DailyCap
	view.DailyCap = &limit
	if !agree {
		view.CapReportedBy = highest.WorkerID
		view.CapsByWorker = reported
	}
}

// resetAfter is when the budget day day ends: the next midnight in the
// budget's zone.
func (s *Server) resetAfter(day time.Time) time.Time {
	return time.Date(day.Year(), day.Month(), day.Day()+1, 0, 0, 0, 0, s.cfg.Location)
}

// ProviderListOutput is GET /v1/providers.
type ProviderListOutput struct {
	Body struct {
		Providers []*ProviderView `json:"providers"`
	}
}

func (s *Server) registerProviders(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "provider-list",
		Method:      http.MethodGet,
		Path:        "/v1/providers",
		Summary:     "List the providers' daily call budgets: cap, used today, remaining",
		Tags:        []string{"providers"},
		Security:    []map[string][]string{{"bearer": {}}},
	}, s.listProviders)
}

func (s *Server) listProviders(ctx context.Context, _ *struct{}) (*ProviderListOutput, error) {
	byProvider := map[string][]string{}
	var names []string
	for _, def := range s.cfg.Catalog.All() {
		p := def.Provider()
		if p == "" {
			continue // the job calls no provider
		}
		if _, seen := byProvider[p]; !seen {
			names = append(names, p)
		}
		byProvider[p] = append(byProvider[p], def.Name())
	}
	slices.Sort(names)
	day := s.cfg.Today()
	reported, err := s.workerCaps(ctx)
	if err != nil {
		return nil, s.problemFrom(ctx, err)
	}
	out := &ProviderListOutput{}
	out.Body.Providers = make([]*ProviderView, 0, len(names))
	for _, p := range names {
		used, err := s.queries.ProviderCallBudgetGet(ctx, s.reads, &queries.ProviderCallBudgetGetParams{Provider: p, Day: day})
		if err := queries.Interpret(err); err != nil && !errors.Is(err, queries.ErrNotFound) {
			return nil, s.problemFrom(ctx, err)
		}
		view := &ProviderView{Provider: p, Jobs: byProvider[p], Day: day.Format(time.DateOnly), UsedToday: int(used), Used: int(used), ResetsAt: s.resetAfter(day)}
		s.providerCap(view, reported[p])
		view.Cap = view.DailyCap
		if view.DailyCap != nil {
			remaining := max(*view.DailyCap-int(used), 0)
			view.Remaining = &remaining
		}
		out.Body.Providers = append(out.Body.Providers, view)
	}
	return out, nil
}
