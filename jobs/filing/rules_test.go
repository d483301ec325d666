package filing

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		report string
		risk   bool
		reason string
	}{
		{"부도발생", true, "dishonour of bills (부도발생)"},
		{"회생절차개시신청", true, "rehabilitation proceedings (회생절차개시)"},
		{"[기재정정]회생절차개시결정", true, "rehabilitation proceedings (회생절차개시)"},
		{"영업정지", true, "business suspension (영업정지)"},
		{"감사보고서제출(감사의견 한정)", true, "audit opinion: qualified (한정)"},
		{"감사보고서제출(감사의견 부적정)", true, "audit opinion: adverse (부적정)"},
		{"감사보고서제출(감사의견 의견거절)", true, "audit opinion: disclaimer (의견거절)"},
		{"소송등의제기", true, "large lawsuit filed (소송등의제기)"},
		{"파산신청", true, "bankruptcy (파산)"},
		{"당좌거래정지", true, "current account suspended (당좌거래정지)"},
		{"횡령ㆍ배임혐의발생", true, "embezzlement or breach of trust (횡령ㆍ배임)"},
		{"주권매매거래정지", true, "delisting, administrative issue or trading halt"},
		{"부도발생(당좌거래정지)", true, "dishonour of bills (부도발생); current account suspended (당좌거래정지)"},
		{"감사보고서제출(감사의견 적정)", false, ""},
		{"감사보고서 (2024.12)", false, ""},
		{"분기보고서 (2025.03)", false, ""},
		{"단일판매ㆍ공급계약체결", false, ""},
		{"주요사항보고서(자기주식취득결정)", false, ""},
		{"한정판매계약", false, ""},
	} {
		risk, reason := Classify(tc.report)
		require.Equal(t, tc.risk, risk, tc.report)
		require.Equal(t, tc.reason, reason, tc.report)
	}
}
