package filing_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/catalog/jobstest"
	"github.com/buildrisk/radar/jobs/filing"
)

func TestFilingParse_ValidateAndEstimate(t *testing.T) {
	t.Parallel()
	jobstest.RunParamCases(t, filing.Spec(), []jobstest.ParamCase{
		{Name: "AllTracked", Raw: `{"from":"2025-01-01","to":"2025-03-31"}`,
			Canonical: `{"from":"2025-01-01","to":"2025-03-31"}`, Estimate: 0},
		{Name: "EmptyCorpCodesIsAllTracked", Raw: `{"from":"2025-01-01","to":"2025-03-31","corpCodes":[]}`,
			Canonical: `{"from":"2025-01-01","to":"2025-03-31"}`, Estimate: 0},
		{Name: "CorpCodesSortedAndDeduplicated", Raw: `{"corpCodes":["00200000","00126380","00200000"],"to":"2025-01-01","from":"2025-01-01"}`,
			Canonical: `{"from":"2025-01-01","to":"2025-01-01","corpCodes":["00126380","00200000"]}`, Estimate: 2},
		{Name: "LeapYear366Days", Raw: `{"from":"2024-01-01","to":"2024-12-31"}`,
			Canonical: `{"from":"2024-01-01","to":"2024-12-31"}`, Estimate: 0},
		{Name: "TooLong", Raw: `{"from":"2024-01-01","to":"2025-01-01"}`, BadField: "params.to"},
		{Name: "Reversed", Raw: `{"from":"2025-02-01","to":"2025-01-31"}`, BadField: "params.from"},
		{Name: "MissingFrom", Raw: `{"to":"2025-01-31"}`, BadField: "params.from"},
		{Name: "MissingTo", Raw: `{"from":"2025-01-31"}`, BadField: "params.to"},
		{Name: "BadDate", Raw: `{"from":"2025-02-30","to":"2025-03-01"}`, BadField: "params.from"},
		{Name: "BadFormat", Raw: `{"from":"20250101","to":"2025-03-01"}`, BadField: "params.from"},
		{Name: "BadCorpCode", Raw: `{"from":"2025-01-01","to":"2025-01-02","corpCodes":["00126380","1234567"]}`, BadField: "params.corpCodes[1]"},
		{Name: "CorpCodeNotString", Raw: `{"from":"2025-01-01","to":"2025-01-02","corpCodes":[126380]}`, BadField: "params.corpCodes[0]"},
		{Name: "UnknownField", Raw: `{"from":"2025-01-01","to":"2025-01-02","date":"x"}`, BadField: "params.date"},
	})
}

func TestFilingParse_Scheduled(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 31, 19, 0, 0, 0, catalog.Seoul)
	raw := filing.Spec().ScheduledParams(now)
	require.JSONEq(t, `{"from":"2026-01-01","to":"2026-03-31"}`, string(raw), "the last 90 days")
	_, err := filing.Spec().Decode(raw)
	require.NoError(t, err)
}
