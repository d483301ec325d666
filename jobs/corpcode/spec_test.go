package corpcode_test

import (
	"testing"

	"github.com/buildrisk/radar/catalog/jobstest"
	"github.com/buildrisk/radar/jobs/corpcode"
)

func TestCorpCodeSync_ValidateAndEstimate(t *testing.T) {
	t.Parallel()
	jobstest.RunParamCases(t, corpcode.Spec(), []jobstest.ParamCase{
		{Name: "Empty", Raw: `{}`, Canonical: `{}`, Estimate: 1},
		{Name: "Absent", Raw: ``, Canonical: `{}`, Estimate: 1},
		{Name: "Null", Raw: `null`, Canonical: `{}`, Estimate: 1},
		{Name: "UnknownField", Raw: `{"date":"2025-01-01"}`, BadField: "params.date"},
		{Name: "NotAnObject", Raw: `[]`, BadField: "params"},
	})
}
