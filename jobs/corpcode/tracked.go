package corpcode

import "strings"

// The tracked rule: which companies the radar watches.
//
// A company is tracked when its Korean name contains one of
// trackedKeywords, or its English name one of trackedEngKeywords, and its
// Korean name contains none of untrackedKeywords. The keywords are the
// suffixes Korean builders and housing developers carry (건설 construction,
// 토건 civil works, 건영, 산업개발 industrial development, 이앤씨 / E&C,
// 엔지니어링 engineering, 주택 housing, and in English E&C or
// Construction); the exclusions keep out financial institutions named after
// what they finance or guarantee (한국주택금융공사, 건설공제조합, 주택도시보증공사
// and the like). The rule is by name only: the exposure ledger lists the
// companies the bank lends to, builders or not, so it does not say who is a
// construction company.
var (
	trackedKeywords    = []string{"건설", "토건", "건영", "산업개발", "이앤씨", "엔지니어링", "주택"}
	trackedEngKeywords = []string{"E&C", "CONSTRUCTION"}
	untrackedKeywords  = []string{"금융", "보증", "은행", "캐피탈", "리츠", "공제조합"}
)

// Tracked reports whether the company named name (Korean) and engName
// (English) is a construction company the radar watches.
func Tracked(name, engName string) bool {
	for _, k := range untrackedKeywords {
		if strings.Contains(name, k) {
			return false
		}
	}
	for _, k := range trackedKeywords {
		if strings.Contains(name, k) {
			return true
		}
	}
	upper := strings.ToUpper(engName)
	for _, k := range trackedEngKeywords {
		if strings.Contains(upper, k) {
			return true
		}
	}
	return false
}
