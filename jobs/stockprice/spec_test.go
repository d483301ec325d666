package stockprice_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/catalog/jobstest"
	"github.com/buildrisk/radar/jobs/stockprice"
)

func TestStockPrice_ValidateAndEstimate(t *testing.T) {
	t.Parallel()
	jobstest.RunParamCases(t, stockprice.Spec(), []jobstest.ParamCase{
		{Name: "Weekday", Raw: `{"date":"2025-03-14"}`, Canonical: `{"date":"2025-03-14"}`, Estimate: 0},
		{Name: "Missing", Raw: `{}`, BadField: "params.date"},
		{Name: "BadDate", Raw: `{"date":"2025-13-01"}`, BadField: "params.date"},
		{Name: "NotString", Raw: `{"date":20250314}`, BadField: "params.date"},
		{Name: "UnknownField", Raw: `{"date":"2025-03-14","from":"2025-03-14"}`, BadField: "params.from"},
	})
	weekend := &stockprice.Params{Date: "2025-03-15"}
	require.True(t, weekend.Weekend(), "a Saturday")
	require.False(t, (&stockprice.Params{Date: "2025-03-14"}).Weekend())
	require.JSONEq(t, `{"date":"2026-03-31"}`, string(stockprice.Spec().ScheduledParams(time.Date(2026, 3, 31, 18, 0, 0, 0, catalog.Seoul))))
}
