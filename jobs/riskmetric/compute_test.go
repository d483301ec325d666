package riskmetric

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func day(s string) time.Time {
	d, err := time.Parse(time.DateOnly, s)
	if err != nil {
		panic(err)
	}
	return d
}

func TestDrawdown(t *testing.T) {
	t.Parallel()
	d := day("2025-03-14")
	closes := func(values ...int64) []Close {
		out := make([]Close, len(values))
		for i, v := range values {
			out[i] = Close{Date: d.AddDate(0, 0, -i), Close: v}
		}
		return out
	}
	require.Nil(t, Drawdown(nil, d))
	require.InDelta(t, 0, *Drawdown(closes(100), d), 1e-12)
	require.InDelta(t, 80.0/125-1, *Drawdown(closes(80, 90, 125, 100), d), 1e-12)
	require.InDelta(t, 0, *Drawdown(closes(130, 90, 125), d), 1e-12, "a new high is no drawdown")

	long := make([]int64, 25)
	for i := range long {
		long[i] = 100
	}
	long[22] = 1000 // outside the 20 trading days
	require.InDelta(t, 0, *Drawdown(closes(long...), d), 1e-12)

	stale := []Close{{Date: d.AddDate(0, 0, -PriceMaxAgeDays-1), Close: 10}, {Date: d.AddDate(0, 0, -30), Close: 100}}
	require.Nil(t, Drawdown(stale, d), "prices too old to say anything about the date")
	require.NotNil(t, Drawdown(stale, d.AddDate(0, 0, -1)))
}

func TestGradeChange(t *testing.T) {
	t.Parallel()
	require.Equal(t, int32(3), *GradeChange("BBB", "A"), "A → BBB is 3 notches down")
	require.Equal(t, int32(-1), *GradeChange("AA", "AA-"), "an upgrade is negative")
	require.Equal(t, int32(0), *GradeChange("BB", "BB"))
	require.Nil(t, GradeChange("XYZ", "BB"))
	require.Nil(t, GradeChange("BB", ""))
}

func TestChange(t *testing.T) {
	t.Parallel()
	require.InDelta(t, -0.5, *Change(10, 20), 1e-12)
	require.InDelta(t, 0.25, *Change(25, 20), 1e-12)
	require.Nil(t, Change(10, 0))
}

func TestWindows(t *testing.T) {
	t.Parallel()
	filingFrom, recentFrom, recentTo, previousFrom, previousTo := Windows(day("2025-06-15"))
	require.Equal(t, day("2025-03-18"), filingFrom, "90 days, the date included")
	require.Equal(t, day("2025-03-16"), recentFrom)
	require.Equal(t, day("2025-06-15"), recentTo)
	require.Equal(t, day("2024-12-16"), previousFrom)
	require.Equal(t, day("2025-03-15"), previousTo)
}
