package api

import (
	"context"
	"errors"
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
	DailyCap  *int     `json:"dailyCap" doc:"calls allowed per day; null when the provider has no cap"`
	UsedToday int      `json:"usedToday" doc:"calls spent today by every worker together"`
	Remaining *int     `json:"remaining" doc:"calls left today; null when the provider has no cap"`
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
	out := &ProviderListOutput{}
	out.Body.Providers = make([]*ProviderView, 0, len(names))
	for _, p := range names {
		used, err := s.queries.ProviderCallBudgetGet(ctx, s.reads, &queries.ProviderCallBudgetGetParams{Provider: p, Day: day})
		if err := queries.Interpret(err); err != nil && !errors.Is(err, queries.ErrNotFound) {
			return nil, s.problemFrom(ctx, err)
		}
		view := &ProviderView{Provider: p, Jobs: byProvider[p], Day: day.Format(time.DateOnly), UsedToday: int(used)}
		if limit, ok := s.cfg.DailyCaps[p]; ok {
			remaining := max(limit-int(used), 0)
			view.DailyCap, view.Remaining = &limit, &remaining
		}
		out.Body.Providers = append(out.Body.Providers, view)
	}
	return out, nil
}
