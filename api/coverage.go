package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/catalog/coverage"
)

// CoverageView is one job's coverage: its targets for the data date and how
// many of them are current, counted from the domain tables (jobs.Coverage).
type CoverageView struct {
	Job         string    `json:"job"`
	DataDate    string    `json:"dataDate" doc:"the date whose rows must be current, YYYY-MM-DD in BUILDRISK_TIMEZONE"`
	Targets     int64     `json:"targets" doc:"targets the job's source of truth names for the data date"`
	Current     int64     `json:"current" doc:"targets with the job's row for the data date"`
	Missing     int64     `json:"missing" doc:"targets - current: rows lost or never written, whatever the runs reported"`
	AsOf        time.Time `json:"asOf" doc:"when the counts were taken (at most BUILDRISK_COVERAGE_MAX_AGE ago)"`
	TargetsDesc string    `json:"targetsDescription"`
	CurrentDesc string    `json:"currentDescription"`
	OnlyMissing bool      `json:"onlyMissing" doc:"the job's params take onlyMissing: a request that plans only the missing targets"`
}

// CoverageListOutput is GET /v1/coverage.
type CoverageListOutput struct {
	Body struct {
		Coverage []*CoverageView `json:"coverage"`
	}
}

// Page sizes of GET /v1/coverage/{job}/missing.
const (
	CoverageMissingLimitDefault = 100
	CoverageMissingLimitMax     = coverage.MissingLimitMax
)

type coverageMissingInput struct {
	Job    string `path:"job"`
	Limit  string `query:"limit" doc:"page size, 1..1000 (default 100)"`
	Cursor string `query:"cursor" doc:"nextCursor of the previous page"`
}

// CoverageMissingOutput is GET /v1/coverage/{job}/missing.
type CoverageMissingOutput struct {
	Body struct {
		Job        string   `json:"job"`
		DataDate   string   `json:"dataDate"`
		Missing    []string `json:"missing" doc:"the missing targets in key order (corp codes; stock codes for stockPrice)"`
		NextCursor *string  `json:"nextCursor" doc:"pass as cursor for the next page; null on the last page"`
	}
}

func (s *Server) registerCoverage(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "coverage-list",
		Method:      http.MethodGet,
		Path:        "/v1/coverage",
		Summary:     "Every job's coverage: targets, current and missing for its data date",
		Tags:        []string{"coverage"},
		Security:    []map[string][]string{{"bearer": {}}},
	}, func(ctx context.Context, _ *struct{}) (*CoverageListOutput, error) {
		snap, err := s.cfg.Coverage.Snapshot(ctx)
		if err != nil {
			return nil, s.problemFrom(ctx, err)
		}
		out := &CoverageListOutput{}
		out.Body.Coverage = make([]*CoverageView, 0, len(snap))
		for _, c := range snap {
			def, _ := s.cfg.Catalog.Lookup(c.Job)
			cov := def.Coverage()
			out.Body.Coverage = append(out.Body.Coverage, &CoverageView{
				Job: c.Job, DataDate: c.DataDate.Format(time.DateOnly), Targets: c.Targets, Current: c.Current,
				Missing: c.Missing(), AsOf: c.AsOf, TargetsDesc: cov.Targets, CurrentDesc: cov.Current,
				OnlyMissing: cov.OnlyMissing,
			})
		}
		return out, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "coverage-missing",
		Method:      http.MethodGet,
		Path:        "/v1/coverage/{job}/missing",
		Summary:     "A job's missing targets for its data date, paged",
		Tags:        []string{"coverage"},
		Security:    []map[string][]string{{"bearer": {}}},
		Errors:      []int{http.StatusBadRequest, http.StatusNotFound},
	}, func(ctx context.Context, in *coverageMissingInput) (*CoverageMissingOutput, error) {
		limit := CoverageMissingLimitDefault
		if in.Limit != "" {
			n, err := strconv.Atoi(in.Limit)
			if err != nil || n < 1 || n > CoverageMissingLimitMax {
				return nil, badQuery("limit", fmt.Sprintf("%s is not an integer from 1 to %d", catalog.Quote(in.Limit), CoverageMissingLimitMax))
			}
			limit = n
		}
		after := ""
		if in.Cursor != "" {
			raw, ok := decodeCursor(in.Cursor)
			if !ok {
				return nil, badQuery("cursor", "not a cursor returned by this API")
			}
			after = raw
		}
		targets, day, err := s.cfg.Coverage.Missing(ctx, in.Job, after, limit)
		if errors.Is(err, coverage.ErrNoCoverage) {
			return nil, huma.Error404NotFound("no coverage definition for job " + in.Job)
		}
		if err != nil {
			return nil, s.problemFrom(ctx, err)
		}
		out := &CoverageMissingOutput{}
		out.Body.Job, out.Body.DataDate, out.Body.Missing = in.Job, day.Format(time.DateOnly), targets
		if out.Body.Missing == nil {
			out.Body.Missing = []string{}
		}
		if len(targets) == limit {
			cursor := base64.RawURLEncoding.EncodeToString([]byte(targets[len(targets)-1]))
			out.Body.NextCursor = &cursor
		}
		return out, nil
	})
}

type jobHistoryInput struct {
	Job  string `path:"job"`
	Days string `query:"days" doc:"how many days, 1..31 (default 14)"`
}

// HistoryDayView is one day of a job's history.
type HistoryDayView struct {
	Day     string   `json:"day" doc:"YYYY-MM-DD in BUILDRISK_TIMEZONE, by the database's clock"`
	Outcome string   `json:"outcome" enum:"completed,failed,stopped,abandoned,running,missed,none" doc:"the status of the job's newest execution that started that day; missed when none started and a due time of that day was missed; none otherwise"`
	Targets *int64   `json:"targets" doc:"TODAY's target set (targets are not kept per day); null without coverage that day"`
	Current *int64   `json:"current" doc:"how many of today's targets have the job's row for that day; null without coverage that day"`
	Percent *float64 `json:"percent" doc:"current / targets in percent (100 with no targets); null for a job without a coverage definition, or a day that is not one of its data dates (stockPrice on a weekend)"`
}

// JobHistoryOutput is GET /v1/jobs/{job}/history.
type JobHistoryOutput struct {
	Body struct {
		Job  string            `json:"job"`
		Days []*HistoryDayView `json:"days" doc:"newest first, today included"`
	}
}

func (s *Server) registerJobHistory(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "job-history",
		Method:      http.MethodGet,
		Path:        "/v1/jobs/{job}/history",
		Summary:     "A job's last days: each day's outcome and coverage, newest first",
		Description: "Per day (BUILDRISK_TIMEZONE, the database's clock) the outcome of the job's newest execution " +
			"that started that day, or missed / none, and, for a job with a coverage definition, the day's coverage: " +
			"how many of TODAY's targets have the job's row for that day (the target set is today's: it is not kept per day).",
		Tags:     []string{"jobs"},
		Security: []map[string][]string{{"bearer": {}}},
		Errors:   []int{http.StatusBadRequest, http.StatusNotFound},
	}, func(ctx context.Context, in *jobHistoryInput) (*JobHistoryOutput, error) {
		days := coverage.HistoryDaysDefault
		if in.Days != "" {
			n, err := strconv.Atoi(in.Days)
			if err != nil || n < 1 || n > coverage.HistoryDaysMax {
				return nil, badQuery("days", fmt.Sprintf("%s is not an integer from 1 to %d", catalog.Quote(in.Days), coverage.HistoryDaysMax))
			}
			days = n
		}
		if _, ok := s.cfg.Catalog.Lookup(in.Job); !ok {
			return nil, huma.Error404NotFound("unknown job " + in.Job)
		}
		hist, err := s.cfg.Coverage.History(ctx, in.Job, days)
		if err != nil {
			return nil, s.problemFrom(ctx, err)
		}
		out := &JobHistoryOutput{}
		out.Body.Job = in.Job
		out.Body.Days = make([]*HistoryDayView, len(hist))
		for i, d := range hist {
			v := &HistoryDayView{Day: d.Day.Format(time.DateOnly), Outcome: d.Outcome, Percent: d.Percent()}
			if d.Covered {
				v.Targets, v.Current = &d.Targets, &d.Current
			}
			out.Body.Days[i] = v
		}
		return out, nil
	})
}
