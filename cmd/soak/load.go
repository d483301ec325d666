package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// allJobs are the catalog's jobs (the contract's job table).
var allJobs = []string{"corpCodeSync", "filingParse", "stockPrice", "aptTrade", "creditEval", "metrics", "rules"}

// apiCall makes one API call as the operator, records the answer as
// evidence and decodes a JSON object answer.
func (s *system) apiCall(ctx context.Context, kind RequestKind, method, path, job, body string) (Answer, map[string]any) {
	a := Answer{At: time.Now(), Kind: kind, Method: method, Path: path, Job: job}
	req, err := http.NewRequestWithContext(ctx, method, s.apiURL+path, strings.NewReader(body))
	if err != nil {
		a.Err = err.Error()
		return a, nil
	}
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.http.Do(req)
	a.Latency = time.Since(a.At)
	if err != nil {
		if ctx.Err() != nil {
			return a, nil // the harness gave up, not the api: no evidence
		}
		a.Err = err.Error()
		s.ev.addAnswer(a)
		return a, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	a.Status = resp.StatusCode
	a.Body = string(raw[:min(len(raw), 200)])
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	if id, ok := out["requestId"]; ok && a.Status == http.StatusAccepted {
		a.RequestID = fmt.Sprint(id)
	}
	s.ev.addAnswer(a)
	return a, out
}

// apiJSON is apiCall for the harness's own (control) calls.
func (s *system) apiJSON(ctx context.Context, method, path, body string) (int, map[string]any, error) {
	a, out := s.apiCall(ctx, KindControl, method, path, "", body)
	if a.Err != "" {
		return 0, nil, fmt.Errorf("%s %s: %s", method, path, a.Err)
	}
	return a.Status, out, nil
}

// load makes random requests across every job until ctx ends: valid ones,
// duplicates of a request just accepted, and invalid ones.
type load struct {
	s       *system
	rng     *rand.Rand
	tracked []string // corp codes of tracked companies, for filingParse
	last    map[string]string
	counts  map[RequestKind]int
}

// regions are the aptTrade regions the load picks from.
var regions = []string{"11110", "11140", "11170", "11200", "11215", "11230", "11260", "11290"}

func (l *load) run(ctx context.Context) {
	l.last = map[string]string{}
	l.counts = map[RequestKind]int{}
	for ctx.Err() == nil {
		switch r := l.rng.Float64(); {
		case r < 0.55:
			job, body := l.valid()
			a, _ := l.s.apiCall(ctx, KindValid, http.MethodPost, "/v1/jobs/"+job+"/requests", job, body)
			if a.Status == http.StatusAccepted {
				l.last[job] = body
			}
			l.counts[KindValid]++
		case r < 0.75 && len(l.last) > 0:
			jobs := make([]string, 0, len(l.last))
			for _, j := range allJobs {
				if _, ok := l.last[j]; ok {
					jobs = append(jobs, j)
				}
			}
			job := jobs[l.rng.IntN(len(jobs))]
			l.s.apiCall(ctx, KindDuplicate, http.MethodPost, "/v1/jobs/"+job+"/requests", job, l.last[job])
			l.counts[KindDuplicate]++
		default:
			bad := invalidRequests[l.rng.IntN(len(invalidRequests))]
			l.s.apiCall(ctx, KindInvalid, http.MethodPost, "/v1/jobs/"+bad.job+"/requests", bad.job, bad.body)
			l.counts[KindInvalid]++
		}
		select {
		case <-ctx.Done():
		case <-time.After(l.s.cfg.requestGap/2 + time.Duration(l.rng.Int64N(int64(l.s.cfg.requestGap)))):
		}
	}
}

// valid returns a random valid request.
func (l *load) valid() (job, body string) {
	month := func() time.Time {
		return time.Date(2024+l.rng.IntN(2), time.Month(1+l.rng.IntN(12)), 1, 0, 0, 0, 0, time.UTC)
	}
	day := func() time.Time { return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, l.rng.IntN(180)) }
	job = allJobs[l.rng.IntN(len(allJobs))]
	var params any
	switch job {
	case "aptTrade":
		n := 1 + l.rng.IntN(3)
		picked := make([]string, 0, n)
		for _, i := range l.rng.Perm(len(regions))[:n] {
			picked = append(picked, regions[i])
		}
		from := month()
		params = map[string]any{"regions": picked, "from": from.Format("2006-01"), "to": from.AddDate(0, l.rng.IntN(6), 0).Format("2006-01")}
	case "filingParse":
		from := day()
		p := map[string]any{"from": from.Format(time.DateOnly), "to": from.AddDate(0, 0, l.rng.IntN(90)).Format(time.DateOnly)}
		if len(l.tracked) > 0 && l.rng.IntN(2) == 0 {
			n := 1 + l.rng.IntN(min(20, len(l.tracked)))
			codes := make([]string, 0, n)
			for _, i := range l.rng.Perm(len(l.tracked))[:n] {
				codes = append(codes, l.tracked[i])
			}
			p["corpCodes"] = codes
		}
		params = p
	case "stockPrice":
		params = map[string]any{"date": day().Format(time.DateOnly)}
	case "creditEval":
		params = map[string]any{}
		if l.rng.IntN(3) == 0 {
			params = map[string]any{"backfill": true}
		}
	case "metrics", "rules":
		params = map[string]any{"date": day().Format(time.DateOnly)}
	default:
		params = map[string]any{}
	}
	raw, _ := json.Marshal(map[string]any{"params": params})
	return job, string(raw)
}

// invalidRequests are requests the api must refuse with a 4xx: bad params
// of every job, an unknown job, a bad maxCalls and bodies that are not the
// request's shape.
var invalidRequests = []struct{ job, body string }{
	{"aptTrade", `{"params":{"regions":["1111"],"from":"2025-01","to":"2025-02"}}`},
	{"aptTrade", `{"params":{"regions":["11110"],"from":"2025-05","to":"2025-02"}}`},
	{"aptTrade", `{"params":{"regions":["11110"],"from":"2010-01","to":"2025-02"}}`},
	{"aptTrade", `{"params":{"regions":["11110"],"from":"2025-01","to":"2025-02","region":"x"}}`},
	{"aptTrade", `{"params":{"regions":["11110"],"from":"2025-01","to":"2025-02"},"maxCalls":0}`},
	{"filingParse", `{"params":{"from":"2025-13-01","to":"2025-12-31"}}`},
	{"filingParse", `{"params":{"from":"2025-01-01","to":"2025-01-31","corpCodes":["123"]}}`},
	{"stockPrice", `{"params":{"date":"yesterday"}}`},
	{"creditEval", `{"params":{"backfill":"yes"}}`},
	{"metrics", `{"params":{"date":"2025-02-30"}}`},
	{"corpCodeSync", `{"params":{"all":true}}`},
	{"nope", `{"params":{}}`},
	{"aptTrade", `{"params":`},
	{"rules", `[]`},
}
