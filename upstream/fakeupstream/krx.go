package fakeupstream

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// pathStockPrice is the path of the FSC's stock price service.
const pathStockPrice = "/1160100/service/GetStockSecuritiesInfoService/getStockPriceInfo"

// krxDate is the layout of basDt.
const krxDate = "20060102"

// fixedHolidays are the Korean public holidays on fixed solar dates, on
// which KRX does not trade. (The lunar holidays are not modelled.)
var fixedHolidays = map[[2]int]bool{
	{1, 1}: true, {3, 1}: true, {5, 5}: true, {6, 6}: true,
	{8, 15}: true, {10, 3}: true, {10, 9}: true, {12, 25}: true,
}

// isTradingDay reports whether KRX trades on day: a weekday that is not a
// fixed holiday.
func isTradingDay(day time.Time) bool {
	if wd := day.Weekday(); wd == time.Saturday || wd == time.Sunday {
		return false
	}
	return !fixedHolidays[[2]int{int(day.Month()), day.Day()}]
}

// previousTradingDay returns the last trading day before day.
func previousTradingDay(day time.Time) time.Time {
	for d := day.AddDate(0, 0, -1); ; d = d.AddDate(0, 0, -1) {
		if isTradingDay(d) {
			return d
		}
	}
}

// The price model: the log price is a random walk over calendar days from
// priceEpoch, with uniform daily steps of up to ±dailyStep, plus dropStep a
// day inside a company's drop window (about -40% over DropDays).
var priceEpoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	dailyStep = 0.02
	dropStep  = -0.036
)

// stockModel holds what a stock's prices derive from.
type stockModel struct {
	h         uint64  // the stock's hash
	logBase   float64 // log price at priceEpoch
	shares    int64
	volume    float64 // typical daily volume
	dropStart int64   // first day of the drop window from priceEpoch, or -1<<62
}

// newStockModel derives the model of c's stock from the seed.
func newStockModel(seed int64, c *Company) stockModel {
	h := newHasher(seed).str("stock").str(c.StockCode)
	rng := newRand(h)
	m := stockModel{
		h:         h.sum(),
		logBase:   math.Log(1_000) + rng.Float64()*math.Log(200), // 1,000 to 200,000 won
		shares:    int64(5_000_000 + rng.IntN(295_000_000)),
		volume:    math.Exp(math.Log(20_000) + rng.Float64()*math.Log(100)), // 20,000 to 2,000,000
		dropStart: math.MinInt64 / 2,
	}
	if !c.DropStart.IsZero() {
		m.dropStart = dayIndex(c.DropStart)
	}
	return m
}

// dayIndex counts the days from priceEpoch to day.
func dayIndex(day time.Time) int64 {
	return int64(math.Round(day.Sub(priceEpoch).Hours() / 24))
}

// step returns the log-price change of day i (from day i-1).
func (m stockModel) step(i int64) float64 {
	r := (unitOf(mix64(m.h^uint64(i)*0x9e3779b97f4a7c15)) - 0.5) * 2 * dailyStep
	if i >= m.dropStart && i < m.dropStart+DropDays {
		r += dropStep
	}
	return r
}

// closes returns the closing prices on day index i and on the earlier day
// index prev, walking from the epoch once.
func (m stockModel) closes(i, prev int64) (closeI, closePrev float64) {
	logAt := func(target int64) float64 { // used only when i and prev are on opposite sides of the epoch
		l := m.logBase
		if target > 0 {
			for k := int64(1); k <= target; k++ {
				l += m.step(k)
			}
		} else {
			for k := int64(0); k > target; k-- {
				l -= m.step(k)
			}
		}
		return l
	}
	if prev <= 0 || i <= 0 {
		return math.Exp(logAt(i)), math.Exp(logAt(prev))
	}
	l := m.logBase
	var lPrev float64
	for k := int64(1); k <= i; k++ {
		l += m.step(k)
		if k == prev {
			lPrev = l
		}
	}
	return math.Exp(l), math.Exp(lPrev)
}

// tick rounds a price to KRX's tick size for its level.
func tick(p float64) int64 {
	var step int64
	switch {
	case p < 2_000:
		step = 1
	case p < 5_000:
		step = 5
	case p < 20_000:
		step = 10
	case p < 50_000:
		step = 50
	case p < 200_000:
		step = 100
	case p < 500_000:
		step = 500
	default:
		step = 1_000
	}
	return max(roundTo(p, step), 1)
}

// stockPriceItem is one item of the stock price answer; every value is a
// string, as the real service sends them.
type stockPriceItem struct {
	BasDt      string `json:"basDt"`
	SrtnCd     string `json:"srtnCd"`
	IsinCd     string `json:"isinCd"`
	ItmsNm     string `json:"itmsNm"`
	MrktCtg    string `json:"mrktCtg"`
	Clpr       string `json:"clpr"`
	Vs         string `json:"vs"`
	FltRt      string `json:"fltRt"`
	Mkp        string `json:"mkp"`
	Hipr       string `json:"hipr"`
	Lopr       string `json:"lopr"`
	Trqu       string `json:"trqu"`
	TrPrc      string `json:"trPrc"`
	LstgStCnt  string `json:"lstgStCnt"`
	MrktTotAmt string `json:"mrktTotAmt"`
}

// stockPrice generates c's prices on the trading day day.
func stockPrice(seed int64, c *Company, day time.Time) stockPriceItem {
	m := newStockModel(seed, c)
	i := dayIndex(day)
	closeF, prevF := m.closes(i, dayIndex(previousTradingDay(day)))
	closeP, prevP := tick(closeF), tick(prevF)
	rng := newRand(newHasher(seed).str("stockDay").str(c.StockCode).num(i))
	open := tick(prevF * math.Exp((rng.Float64()-0.5)*0.02))
	high := tick(float64(max(open, closeP)) * (1 + rng.Float64()*0.015))
	low := tick(float64(min(open, closeP)) * (1 - rng.Float64()*0.015))
	volumeF := m.volume * (0.5 + rng.Float64())
	if i >= m.dropStart && i < m.dropStart+DropDays {
		volumeF *= 3
	}
	volume := int64(volumeF)
	vs := closeP - prevP
	i64 := func(n int64) string { return strconv.FormatInt(n, 10) }
	return stockPriceItem{
		BasDt:      day.Format(krxDate),
		SrtnCd:     c.StockCode,
		IsinCd:     isin("KR7" + c.StockCode + "00"),
		ItmsNm:     c.Name,
		MrktCtg:    c.Market,
		Clpr:       i64(closeP),
		Vs:         i64(vs),
		FltRt:      strconv.FormatFloat(float64(vs)/float64(prevP)*100, 'f', 2, 64),
		Mkp:        i64(open),
		Hipr:       i64(high),
		Lopr:       i64(low),
		Trqu:       i64(volume),
		TrPrc:      i64(volume * (high + low) / 2),
		LstgStCnt:  i64(m.shares),
		MrktTotAmt: i64(closeP * m.shares),
	}
}

// isin appends the check digit to the first 11 characters of an ISIN
// (letters count as two digits, A=10 ... Z=35, then the Luhn algorithm).
func isin(base string) string {
	var digits []int
	for _, r := range base {
		if r >= 'A' && r <= 'Z' {
			n := int(r-'A') + 10
			digits = append(digits, n/10, n%10)
		} else {
			digits = append(digits, int(r-'0'))
		}
	}
	sum := 0
	for k := range digits { // from the right, doubling every other digit starting with the rightmost
		d := digits[len(digits)-1-k]
		if k%2 == 0 {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
	}
	return fmt.Sprintf("%s%d", base, (10-sum%10)%10)
}

// serveStockPrice answers the FSC's stock price service: the prices on
// basDt of the listed stocks whose code contains likeSrtnCd, as JSON. On a
// day without trading, or when no stock matches, the answer is empty and
// items is "", as the real service sends it.
func (s *Server) serveStockPrice(w http.ResponseWriter, c *call) {
	day, errDay := time.Parse(krxDate, c.q.Get("basDt"))
	like := c.q.Get("likeSrtnCd")
	pageNo, okPage := positiveParam(c.q.Get("pageNo"), 1)
	numOfRows, okRows := positiveParam(c.q.Get("numOfRows"), 10)
	if errDay != nil || !okPage || !okRows || !strings.EqualFold(c.q.Get("resultType"), "json") {
		writeKRX(w, "10", "INVALID_REQUEST_PARAMETER_ERROR", numOfRows, pageNo, 0, nil)
		return
	}
	var items []stockPriceItem
	total := 0
	if isTradingDay(day) {
		u := c.st.u
		first := (pageNo - 1) * numOfRows
		for _, idx := range u.listed {
			company := &u.companies[idx]
			if !strings.Contains(company.StockCode, like) {
				continue
			}
			if total >= first && total < first+numOfRows {
				items = append(items, stockPrice(c.st.cfg.Seed, company, day))
			}
			total++
		}
	}
	writeKRX(w, "00", "NORMAL SERVICE.", numOfRows, pageNo, total, items)
}

// writeKRX answers with the service's JSON envelope.
func writeKRX(w http.ResponseWriter, code, msg string, numOfRows, pageNo, total int, items []stockPriceItem) {
	var itemsValue any = ""
	if len(items) > 0 {
		itemsValue = map[string]any{"item": items}
	}
	type header struct {
		ResultCode string `json:"resultCode"`
		ResultMsg  string `json:"resultMsg"`
	}
	type body struct {
		NumOfRows  int `json:"numOfRows"`
		PageNo     int `json:"pageNo"`
		TotalCount int `json:"totalCount"`
		Items      any `json:"items"`
	}
	type response struct {
		Header header `json:"header"`
		Body   *body  `json:"body,omitempty"`
	}
	resp := response{Header: header{ResultCode: code, ResultMsg: msg}}
	if code == "00" {
		resp.Body = &body{NumOfRows: numOfRows, PageNo: pageNo, TotalCount: total, Items: itemsValue}
	}
	writeJSON(w, http.StatusOK, map[string]any{"response": resp})
}
