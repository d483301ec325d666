package filing

import "strings"

// RiskRule flags a filing as risk-relevant by its report name (report_nm):
// it fires when the name contains every one of All and, when Any is not
// empty, at least one of Any.
type RiskRule struct {
	All    []string
	Any    []string
	Reason string
}

// RiskRules is the documented rule list, most severe first. Each matching
// rule adds its reason; a filing that matches none is not flagged. The
// report names are DART's own titles, so matching them is matching the
// report type (a correction, "[기재정정]...", matches like the original).
//
//   - 부도발생: dishonour of the company's bills or checks.
//   - 당좌거래정지: its current account suspended by the bank.
//   - 회생절차개시 (신청/결정): court rehabilitation proceedings.
//   - 파산: bankruptcy filing or declaration.
//   - 채권은행 등의 관리절차 / 워크아웃: creditor-led restructuring.
//   - 영업정지: business suspension (by a regulator or a court).
//   - 감사의견 한정 / 부적정 / 의견거절 (in an audit report's title): any
//     audit opinion other than unqualified (적정).
//   - 소송등의제기: a lawsuit against the company; DART requires this
//     disclosure only for claims of at least 5-10% of equity, so every one
//     is a large lawsuit.
//   - 해산사유발생: grounds for dissolution.
//   - 횡령ㆍ배임: embezzlement or breach of trust by management.
//   - 상장폐지 / 관리종목지정 / 매매거래정지: delisting, administrative
//     issue designation, trading halt.
var RiskRules = []RiskRule{
	{All: []string{"부도발생"}, Reason: "dishonour of bills (부도발생)"},
	{All: []string{"당좌거래정지"}, Reason: "current account suspended (당좌거래정지)"},
	{All: []string{"회생절차"}, Reason: "rehabilitation proceedings (회생절차개시)"},
	{All: []string{"파산"}, Reason: "bankruptcy (파산)"},
	{Any: []string{"관리절차개시", "워크아웃"}, Reason: "creditor-led restructuring (관리절차개시)"},
	{All: []string{"영업정지"}, Reason: "business suspension (영업정지)"},
	{All: []string{"감사", "의견거절"}, Reason: "audit opinion: disclaimer (의견거절)"},
	{All: []string{"감사", "부적정"}, Reason: "audit opinion: adverse (부적정)"},
	{All: []string{"감사", "한정"}, Reason: "audit opinion: qualified (한정)"},
	{All: []string{"소송등의제기"}, Reason: "large lawsuit filed (소송등의제기)"},
	{All: []string{"해산사유발생"}, Reason: "grounds for dissolution (해산사유발생)"},
	{Any: []string{"횡령", "배임"}, Reason: "embezzlement or breach of trust (횡령ㆍ배임)"},
	{Any: []string{"상장폐지", "관리종목지정", "매매거래정지"}, Reason: "delisting, administrative issue or trading halt"},
}

// Classify returns whether a filing named reportName is risk-relevant and,
// if so, the reasons of every rule it matches, joined with "; ".
func Classify(reportName string) (risk bool, reason string) {
	var reasons []string
	for _, r := range RiskRules {
		if r.matches(reportName) {
			reasons = append(reasons, r.Reason)
		}
	}
	return len(reasons) > 0, strings.Join(reasons, "; ")
}

func (r RiskRule) matches(name string) bool {
	for _, k := range r.All {
		if !strings.Contains(name, k) {
			return false
		}
	}
	if len(r.Any) == 0 {
		return true
	}
	for _, k := range r.Any {
		if strings.Contains(name, k) {
			return true
		}
	}
	return false
}
