package upstream_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

func TestGradeRank(t *testing.T) {
	t.Parallel()

	require.Equal(t, 0, upstream.GradeRank("AAA"))
	require.Equal(t, 7, upstream.GradeRank("BBB+"))
	require.Equal(t, len(upstream.CreditScale)-1, upstream.GradeRank("D"))
	require.Equal(t, -1, upstream.GradeRank("XYZ"))
	require.Equal(t, -1, upstream.GradeRank(""))
}

func TestParseCreditGrade(t *testing.T) {
	t.Parallel()

	g, err := upstream.ParseCreditGrade([]byte(`{"corpCode":"00126380","grade":"BBB+","outlook":"stable","evaluatedAt":"2025-01-02"}`))
	require.NoError(t, err)
	require.Equal(t, upstream.CreditGrade{
		CorpCode:    "00126380",
		Grade:       "BBB+",
		Outlook:     "stable",
		EvaluatedAt: time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC),
	}, g)

	g, err = upstream.ParseCreditGrade([]byte(`{"corpCode":"00126380","grade":"","outlook":"","evaluatedAt":""}`))
	require.NoError(t, err, "an empty grade is not an error")
	require.Empty(t, g.Grade)

	g, err = upstream.ParseCreditGrade([]byte(`{"corpCode":"00126380","grade":"bb","source":"crawl"}`))
	require.NoError(t, err)
	require.Equal(t, upstream.CreditGrade{CorpCode: "00126380", Grade: "BB", Source: "crawl"}, g)

	for _, tc := range []struct {
		name string
		body string
		kind error
		msg  string
	}{
		{name: "unauthorized", body: `{"error":"unauthorized","message":"apiKey is missing or not registered"}`, kind: upstream.ErrKeyRejected, msg: "apiKey is missing"},
		{name: "invalid", body: `{"error":"invalid_request","message":"corpCode must be 8 digits"}`, kind: upstream.ErrInvalidRequest},
		{name: "unknown grade", body: `{"corpCode":"00126380","grade":"Z"}`, msg: `unknown grade "Z"`},
		{name: "bad date", body: `{"corpCode":"00126380","grade":"A","evaluatedAt":"02.01.2025"}`, msg: "bad evaluatedAt"},
		{name: "no corp code", body: `{"grade":"A"}`, msg: "no corpCode"},
		{name: "not json", body: `<html>`, msg: "decode response"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := upstream.ParseCreditGrade([]byte(tc.body))
			require.Error(t, err)
			if tc.kind != nil {
				require.ErrorIs(t, err, tc.kind)
			}
			if tc.msg != "" {
				require.Contains(t, err.Error(), tc.msg)
			}
		})
	}
}

func TestCreditRoundTrip(t *testing.T) {
	t.Parallel()

	fake, srv := startFake(t, fakeupstream.Config{Companies: 100, EmptyRate: 0.5})
	empty := 0
	for _, c := range fake.Companies() {
		status, body := call(t, fake, srv, upstream.EndpointCreditLookup, upstream.CreditLookupQuery(c.CorpCode), "test-key")
		require.Equal(t, http.StatusOK, status)
		lookup, err := upstream.ParseCreditGrade(body)
		require.NoError(t, err)
		require.Equal(t, c.CorpCode, lookup.CorpCode)

		status, body = call(t, fake, srv, upstream.EndpointCreditFallback, upstream.CreditFallbackQuery(c.CorpCode), "test-key")
		require.Equal(t, http.StatusOK, status)
		fallback, err := upstream.ParseCreditGrade(body)
		require.NoError(t, err)
		require.NotEmpty(t, fallback.Grade, "the fallback always has a grade")
		require.Equal(t, "crawl", fallback.Source)

		if lookup.Grade == "" {
			empty++
			continue
		}
		require.Equal(t, fallback.Grade, lookup.Grade)
		require.NotEmpty(t, lookup.Outlook)
		require.False(t, lookup.EvaluatedAt.IsZero())
		if c.Distressed {
			require.GreaterOrEqual(t, upstream.GradeRank(lookup.Grade), upstream.GradeRank("BB-"))
		}
	}
	require.InDelta(t, 50, empty, 20)

	status, body := call(t, fake, srv, upstream.EndpointCreditLookup, upstream.CreditLookupQuery(fake.Companies()[0].CorpCode), "")
	require.Equal(t, http.StatusUnauthorized, status)
	_, err := upstream.ParseCreditGrade(body)
	require.ErrorIs(t, err, upstream.ErrKeyRejected)
}
