package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queries"
)

// AlertView is one risk alert: a rule that fired for a company on a date.
type AlertView struct {
	ID          string         `json:"id"`
	CorpCode    string         `json:"corpCode" doc:"8-digit DART corp code"`
	CompanyName string         `json:"companyName" doc:"\"\" when the company is not in the company table"`
	Date        string         `json:"date" doc:"alert date, YYYY-MM-DD"`
	Rule        string         `json:"rule" enum:"PRICE_DRAWDOWN,RISK_FILINGS,GRADE_DOWNGRADE,APT_VOLUME_DROP,APT_PRICE_DROP,COMPOUND"`
	Severity    string         `json:"severity" enum:"low,medium,high,critical"`
	Values      map[string]any `json:"values" doc:"the metric value(s) the rule compared and its threshold"`
	ExecutionID string         `json:"executionId" doc:"the rules execution that wrote the alert"`
	CreatedAt   time.Time      `json:"createdAt"`
}

type alertListInput struct {
	Date    string `query:"date" doc:"alert date, YYYY-MM-DD; default: the newest date with alerts (of the company, when given)"`
	Company string `query:"company" doc:"only this company: its 8-digit DART corp code"`
}

// AlertListOutput is GET /v1/alerts.
type AlertListOutput struct {
	Body struct {
		Date   *string      `json:"date" doc:"the date listed; null when there are no alerts at all"`
		Alerts []*AlertView `json:"alerts" doc:"most severe first"`
	}
}

func (s *Server) registerAlerts(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "alert-list",
		Method:      http.MethodGet,
		Path:        "/v1/alerts",
		Summary:     "List the risk alerts of a date",
		Description: "Alerts written by the rules job, with the values that fired them. Rules: " + s.cfg.AlertRules + ".",
		Tags:        []string{"alerts"},
		Security:    []map[string][]string{{"bearer": {}}},
		Errors:      []int{http.StatusBadRequest},
	}, s.listAlerts)
}

func (s *Server) listAlerts(ctx context.Context, in *alertListInput) (*AlertListOutput, error) {
	var company *string
	if in.Company != "" {
		if !catalog.IsCorpCode(in.Company) {
			return nil, badQuery("company", fmt.Sprintf("%s is not an 8-digit DART corp code", catalog.Quote(in.Company)))
		}
		company = &in.Company
	}
	out := &AlertListOutput{}
	out.Body.Alerts = []*AlertView{}
	var day time.Time
	if in.Date != "" {
		var err error
		if day, err = time.Parse(time.DateOnly, in.Date); err != nil {
			return nil, badQuery("date", fmt.Sprintf("%s is not a date in the form YYYY-MM-DD", catalog.Quote(in.Date)))
		}
	} else {
		latest, err := s.queries.RiskAlertLatestDate(ctx, s.reads, company)
		if err := queries.Interpret(err); err != nil {
			if errors.Is(err, queries.ErrNotFound) {
				return out, nil
			}
			return nil, s.problemFrom(ctx, err)
		}
		day = latest
	}
	date := day.Format(time.DateOnly)
	out.Body.Date = &date
	rows, err := s.queries.RiskAlertList(ctx, s.reads, &queries.RiskAlertListParams{AlertDate: day, CorpCode: company})
	if err != nil {
		return nil, s.problemFrom(ctx, err)
	}
	for _, r := range rows {
		view, err := alertViewFromRow(r)
		if err != nil {
			return nil, s.problemFrom(ctx, err)
		}
		out.Body.Alerts = append(out.Body.Alerts, view)
	}
	return out, nil
}

func alertViewFromRow(r *queries.RiskAlertListRow) (*AlertView, error) {
	values := map[string]any{}
	if err := json.Unmarshal(r.Values, &values); err != nil {
		return nil, fmt.Errorf("error decoding alert %d values: %w", r.ID, err)
	}
	return &AlertView{
		ID: formatID(r.ID), CorpCode: r.CorpCode, CompanyName: r.CompanyName, Date: r.AlertDate.Format(time.DateOnly),
		Rule: r.Rule, Severity: r.Severity, Values: values, ExecutionID: formatID(r.ExecutionID), CreatedAt: r.CreatedAt,
	}, nil
}
