package fakeupstream

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// pathAptTrade is the path of MOLIT's apartment trade service.
const pathAptTrade = "/1613000/RTMSDataSvcAptTrade/getRTMSDataSvcAptTrade"

// xmlContentType is the content type of data.go.kr's XML answers.
const xmlContentType = "application/xml;charset=UTF-8"

// writeDataGoKrKeyError answers a call without a key like the data.go.kr
// gateway answers an unregistered key: HTTP 200 and an XML envelope with
// reason code 30, whatever format was asked for. msg replaces the
// gateway's own message when it is not "".
func writeDataGoKrKeyError(w http.ResponseWriter, msg string) {
	var escaped bytes.Buffer
	_ = xml.EscapeText(&escaped, []byte(cmp.Or(msg, "SERVICE_KEY_IS_NOT_REGISTERED_ERROR")))
	writeBody(w, http.StatusOK, xmlContentType, []byte(`<OpenAPI_ServiceResponse>
	<cmmMsgHeader>
		<errMsg>SERVICE ERROR</errMsg>
		<returnAuthMsg>`+escaped.String()+`</returnAuthMsg>
		<returnReasonCode>30</returnReasonCode>
	</cmmMsgHeader>
</OpenAPI_ServiceResponse>`))
}

// writeMOLITError answers with HTTP 200 and the service's own error header.
func writeMOLITError(w http.ResponseWriter, code, msg string) {
	writeBody(w, http.StatusOK, xmlContentType, fmt.Appendf(nil,
		`<?xml version="1.0" encoding="UTF-8" standalone="yes"?><response><header><resultCode>%s</resultCode><resultMsg>%s</resultMsg></header></response>`,
		code, msg))
}

// aptTrade is one generated apartment trade.
type aptTrade struct {
	serial    string
	aptName   string
	dong      string
	buildYear int
	day       int
	amount    int64 // in 10,000 won
	area      float64
	floor     int
}

// Fixed parts of the generated trades.
var (
	complexPrefixes = []string{"한빛", "푸른솔", "늘푸른", "햇살", "은하수", "새솔", "청솔", "무지개", "한마음", "꿈의숲", "샛별", "초록", "동산", "느티"}
	complexSuffixes = []string{"아파트", "마을", "타운", "파크", "힐스", "1단지", "2단지", "3단지"}
	dongNames       = []string{"신사동", "청운동", "사직동", "효자동", "중계동", "상계동", "역삼동", "대치동", "잠실동", "문정동", "목동", "신정동", "공덕동", "아현동", "불광동", "응암동", "화곡동", "등촌동", "정자동", "서현동", "송도동", "반송동", "둔산동", "우동"}
	unitAreas       = []float64{39.6, 49.94, 59.97, 74.91, 84.97, 101.82, 114.75, 134.88}
	tradesEpoch     = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
)

// maxTradesPerMonth is the most trades a region has in a month.
const maxTradesPerMonth = 40

// aptTrades generates the trades of region (5-digit LAWD code) in the month
// year-month, sorted by day. The count, 0 to 40, and every field derive
// from the seed, the region and the month.
func aptTrades(seed int64, region string, year int, month time.Month) []aptTrade {
	ym := fmt.Sprintf("%04d%02d", year, month)
	rng := newRand(newHasher(seed).str("aptTrade").str(region).str(ym))
	n := rng.IntN(maxTradesPerMonth + 1)

	// A region's price level (10,000 won for 84.97 m²) is fixed; it grows
	// about 3% a year from 2020.
	regionHash := newHasher(seed).str("aptRegion").str(region)
	level := 30_000 + 120_000*regionHash.unit()
	if region[:2] == "11" { // Seoul
		level *= 1.8
	}
	first := time.Date(year, month, 1, 0, 0, 0, 0, time.UTC)
	years := first.Sub(tradesEpoch).Hours() / 24 / 365
	level *= 1 + 0.03*years
	daysInMonth := first.AddDate(0, 1, -1).Day()

	trades := make([]aptTrade, n)
	for i := range trades {
		// A region has 12 complexes, whose name, dong and age are fixed.
		complexHash := regionHash.num(int64(rng.IntN(12)))
		pickOf := func(field int64, n int) int { return int(complexHash.num(field).sum() % uint64(n)) }
		t := aptTrade{
			aptName:   complexPrefixes[pickOf(1, len(complexPrefixes))] + complexSuffixes[pickOf(2, len(complexSuffixes))],
			dong:      dongNames[pickOf(3, len(dongNames))],
			buildYear: 1985 + pickOf(4, 39),
			day:       1 + rng.IntN(daysInMonth),
			area:      unitAreas[rng.IntN(len(unitAreas))],
			floor:     1 + rng.IntN(30),
		}
		price := level * t.area / 84.97 * (0.85 + 0.3*rng.Float64())
		t.amount = max(roundTo(price, 100), 1_000)
		trades[i] = t
	}
	slices.SortStableFunc(trades, func(a, b aptTrade) int { return a.day - b.day })
	for i := range trades {
		trades[i].serial = fmt.Sprintf("%s-%s-%03d", region, ym, i+1)
	}
	return trades
}

// serveAptTrade answers MOLIT's apartment trade service: one page of the
// trades of LAWD_CD in DEAL_YMD, as XML.
func (s *Server) serveAptTrade(w http.ResponseWriter, c *call) {
	region, dealYM := c.q.Get("LAWD_CD"), c.q.Get("DEAL_YMD")
	pageNo, okPage := positiveParam(c.q.Get("pageNo"), 1)
	numOfRows, okRows := positiveParam(c.q.Get("numOfRows"), 10)
	if !isDigits(region, 5) || !isDigits(dealYM, 6) || !okPage || !okRows {
		writeMOLITError(w, "10", "INVALID_REQUEST_PARAMETER_ERROR")
		return
	}
	year, _ := strconv.Atoi(dealYM[:4])
	month, _ := strconv.Atoi(dealYM[4:])
	if month < 1 || month > 12 || year < 1990 || year > 2100 {
		writeMOLITError(w, "10", "INVALID_REQUEST_PARAMETER_ERROR")
		return
	}
	trades := aptTrades(c.st.cfg.Seed, region, year, time.Month(month))
	page := shorten(c, pageOf(trades, pageNo, numOfRows))

	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8" standalone="yes"?><response><header><resultCode>000</resultCode><resultMsg>OK</resultMsg></header><body><items>`)
	var num []byte
	element := func(name, value string) {
		b.WriteString("<" + name + ">")
		_ = xml.EscapeText(&b, []byte(value))
		b.WriteString("</" + name + ">")
	}
	intElement := func(name string, n int) {
		num = strconv.AppendInt(num[:0], int64(n), 10)
		element(name, string(num))
	}
	for _, t := range page {
		b.WriteString("<item>")
		element("aptNm", t.aptName)
		element("aptSeq", t.serial)
		intElement("buildYear", t.buildYear)
		element("dealAmount", groupThousands(t.amount))
		intElement("dealDay", t.day)
		intElement("dealMonth", month)
		intElement("dealYear", year)
		element("dealingGbn", "중개거래")
		element("excluUseAr", strconv.FormatFloat(t.area, 'f', 2, 64))
		intElement("floor", t.floor)
		element("sggCd", region)
		element("umdNm", t.dong)
		b.WriteString("</item>")
	}
	fmt.Fprintf(&b, "</items><numOfRows>%d</numOfRows><pageNo>%d</pageNo><totalCount>%d</totalCount></body></response>",
		numOfRows, pageNo, len(trades))
	writeBody(w, http.StatusOK, xmlContentType, b.Bytes())
}

// pageOf returns page pageNo (from 1) of items, numOfRows a page.
func pageOf[T any](items []T, pageNo, numOfRows int) []T {
	start := (pageNo - 1) * numOfRows
	if start >= len(items) || start < 0 {
		return nil
	}
	return items[start:min(start+numOfRows, len(items))]
}

// shorten applies Config.ShortRate to one page: drawn per call, a short
// page loses its second half (at least one item) while the caller still
// declares the full total.
func shorten[T any](c *call, page []T) []T {
	if rate := c.st.cfg.ShortRate; rate > 0 && len(page) > 0 && c.draw("short") < rate {
		return page[:len(page)/2]
	}
	return page
}

// positiveParam parses a positive integer parameter, def when empty, and
// reports whether it was valid.
func positiveParam(s string, def int) (int, bool) {
	if s == "" {
		return def, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 1_000_000 {
		return 0, false
	}
	return n, true
}

// isDigits reports whether s is exactly n ASCII digits.
func isDigits(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// groupThousands writes n with commas between groups of three digits, as
// MOLIT writes dealAmount ("82,500").
func groupThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	var b []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, s[i])
	}
	if neg {
		return "-" + string(b)
	}
	return string(b)
}
