package fakeupstream

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startServer runs a fake with cfg behind an httptest server.
func startServer(t *testing.T, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	fake := New(cfg)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return fake, srv
}

// get calls path with query q and returns the response and its body.
func get(t *testing.T, srv *httptest.Server, path string, q url.Values) (*http.Response, []byte) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path + "?" + q.Encode())
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// post sends body to path and returns the response and its body.
func post(t *testing.T, srv *httptest.Server, path, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := srv.Client().Post(srv.URL+path, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, out
}

// Queries of one call per endpoint, keys included.
func aptTradeQ(region, ym string) url.Values {
	return url.Values{"serviceKey": {"k"}, "LAWD_CD": {region}, "DEAL_YMD": {ym}, "pageNo": {"1"}, "numOfRows": {"1000"}}
}

func filingQ(corpCode, from, to string) url.Values {
	return url.Values{"crtfc_key": {"k"}, "corp_code": {corpCode}, "bgn_de": {from}, "end_de": {to}, "page_no": {"1"}, "page_count": {"100"}}
}

func stockQ(code, day string) url.Values {
	return url.Values{"serviceKey": {"k"}, "likeSrtnCd": {code}, "basDt": {day}, "resultType": {"json"}, "numOfRows": {"1"}, "pageNo": {"1"}}
}

func creditQ(corpCode string) url.Values {
	return url.Values{"apiKey": {"k"}, "corpCode": {corpCode}}
}

// firstCompany returns the first company of fake matching ok.
func firstCompany(t *testing.T, fake *Server, ok func(Company) bool) Company {
	t.Helper()
	i := slices.IndexFunc(fake.Companies(), ok)
	require.GreaterOrEqual(t, i, 0, "no company matches")
	return fake.Companies()[i]
}

func TestDeterminism(t *testing.T) {
	t.Parallel()

	fakeA, srvA := startServer(t, Config{Companies: 200})
	_, srvB := startServer(t, Config{Companies: 200})
	_, srvOther := startServer(t, Config{Seed: 2, Companies: 200})
	require.Equal(t, fakeA.Companies(), New(Config{Companies: 200}).Companies())
	require.NotEqual(t, fakeA.Companies(), New(Config{Seed: 2, Companies: 200}).Companies())

	listed := firstCompany(t, fakeA, func(c Company) bool { return c.StockCode != "" })
	calls := []struct {
		path string
		q    url.Values
	}{
		{pathAptTrade, aptTradeQ("11680", "202503")},
		{pathCorpCode, url.Values{"crtfc_key": {"k"}}},
		{pathFilingList, filingQ(listed.CorpCode, "20240101", "20251231")},
		{pathStockPrice, stockQ(listed.StockCode, "20250304")},
		{pathCreditLookup, creditQ(listed.CorpCode)},
		{pathCreditFallback, creditQ(listed.CorpCode)},
	}
	for _, call := range calls {
		respA, bodyA := get(t, srvA, call.path, call.q)
		respB, bodyB := get(t, srvB, call.path, call.q)
		require.Equal(t, http.StatusOK, respA.StatusCode, call.path)
		require.Equal(t, http.StatusOK, respB.StatusCode, call.path)
		require.Equal(t, bodyA, bodyB, call.path)
	}

	_, bodyA := get(t, srvA, pathAptTrade, aptTradeQ("11110", "202501"))
	_, bodyOther := get(t, srvOther, pathAptTrade, aptTradeQ("11110", "202501"))
	require.NotEqual(t, bodyA, bodyOther)
}

func TestUniverse(t *testing.T) {
	t.Parallel()

	companies := New(Config{}).Companies()
	require.Len(t, companies, CompaniesDefault)
	codes, stocks := map[string]bool{}, map[string]bool{}
	var construction, distressed, drops int
	for _, c := range companies {
		require.True(t, isDigits(c.CorpCode, 8), c.CorpCode)
		require.False(t, codes[c.CorpCode], "duplicate corp code %s", c.CorpCode)
		codes[c.CorpCode] = true
		if c.StockCode != "" {
			require.True(t, isDigits(c.StockCode, 6), c.StockCode)
			require.False(t, stocks[c.StockCode], "duplicate stock code %s", c.StockCode)
			stocks[c.StockCode] = true
			require.Contains(t, []string{"KOSPI", "KOSDAQ"}, c.Market)
		}
		require.NotEmpty(t, c.MainRegions)
		for _, r := range c.MainRegions {
			require.True(t, isDigits(r, 5), r)
		}
		if c.Construction {
			construction++
		}
		if c.Distressed {
			require.True(t, c.Construction)
			distressed++
		}
		if !c.DropStart.IsZero() {
			require.True(t, c.Construction)
			require.NotEmpty(t, c.StockCode)
			drops++
		}
	}
	require.InDelta(t, 0.25, float64(construction)/float64(len(companies)), 0.05)
	require.Positive(t, distressed)
	require.Positive(t, drops)

	// A tiny universe still has something for the radar to find.
	small := New(Config{Companies: 20}).Companies()
	require.True(t, slices.ContainsFunc(small, func(c Company) bool { return c.Distressed }))
}

func TestCountingAndReset(t *testing.T) {
	t.Parallel()

	fake, srv := startServer(t, Config{Companies: 50})
	company := fake.Companies()[0]

	get(t, srv, pathAptTrade, aptTradeQ("11110", "202501"))
	get(t, srv, pathAptTrade, aptTradeQ("11110", "202501"))
	get(t, srv, pathAptTrade, aptTradeQ("11110", "202502"))
	get(t, srv, pathCorpCode, url.Values{"crtfc_key": {"k"}})
	get(t, srv, pathFilingList, filingQ(company.CorpCode, "20250101", "20250131"))
	get(t, srv, pathStockPrice, stockQ("005930", "20250102"))
	get(t, srv, pathCreditLookup, creditQ(company.CorpCode))
	get(t, srv, pathCreditFallback, url.Values{"corpCode": {company.CorpCode}}) // no key: counted too
	get(t, srv, "/nowhere", nil)                                                // not a provider call

	want := Stats{Total: 8, Calls: map[string]map[string]int64{
		EndpointAptTrade:       {"11110:202501": 2, "11110:202502": 1},
		EndpointCorpCode:       {"all": 1},
		EndpointFilingList:     {company.CorpCode + ":20250101:20250131:1": 1},
		EndpointStockPrice:     {"005930:20250102": 1},
		EndpointCreditLookup:   {company.CorpCode: 1},
		EndpointCreditFallback: {company.CorpCode: 1},
	}}
	require.Equal(t, want, fake.Stats())

	resp, body := get(t, srv, "/__fake/stats", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var got Stats
	require.NoError(t, json.Unmarshal(body, &got))
	require.Equal(t, want, got)

	resp, _ = post(t, srv, "/__fake/reset", "")
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, Stats{Calls: map[string]map[string]int64{}}, fake.Stats())
	_, body = get(t, srv, "/__fake/stats", nil)
	require.JSONEq(t, `{"total":0,"calls":{}}`, string(body))

	fake.Reset()
	get(t, srv, pathCorpCode, url.Values{"crtfc_key": {"k"}})
	require.Equal(t, int64(1), fake.Stats().Total)
}

func TestConfigEndpoint(t *testing.T) {
	t.Parallel()

	fake, srv := startServer(t, Config{Companies: 50, Rate429: 0.1})

	for _, bad := range []string{
		`{`,
		`{"latency":"soon"}`,
		`{"latency":20}`,
		`{"latency":"-5ms"}`,
		`{"errorRate":1.5}`,
		`{"errorRate":0.6,"rate429":0.6}`,
		`{"emptyRate":-0.1}`,
		`{"shortRate":1.1}`,
		`{"companies":-1}`,
		`{"failKeys":{"nope":["x"]}}`,
		`{"errorRat":0.1}`,
		`{"errorRate":0.1} {}`,
	} {
		resp, body := post(t, srv, "/__fake/config", bad)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
		var msg struct{ Error string }
		require.NoError(t, json.Unmarshal(body, &msg), bad)
		require.Contains(t, msg.Error, "bad config", bad)
	}
	require.Equal(t, 0.1, fake.Config().Rate429, "a rejected config must change nothing")

	resp, body := post(t, srv, "/__fake/config", `{"latency":"2ms","errorRate":0.05,"failKeys":{"aptTrade":["11110:202501"]}}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	cfg := fake.Config()
	require.Equal(t, 2*time.Millisecond, cfg.Latency)
	require.Equal(t, 0.05, cfg.ErrorRate)
	require.Equal(t, 0.1, cfg.Rate429, "fields not given keep their value")
	require.Equal(t, map[string][]string{"aptTrade": {"11110:202501"}}, cfg.FailKeys)
	require.Equal(t, 50, cfg.Companies)
	require.Equal(t, int64(1), cfg.Seed)

	_, body = get(t, srv, "/__fake/config", nil)
	require.JSONEq(t, `{"latency":"2ms","errorRate":0.05,"rate429":0.1,"retryAfter":"1s","emptyRate":0,"shortRate":0,"cutBodyRate":0,"hangBodyRate":0,"garbageRate":0,"seed":1,"companies":50,"failKeys":{"aptTrade":["11110:202501"]},"quoteKey":false,"quoteKeyForms":false,"corpNameQuotesKey":false}`, string(body))

	resp, _ = post(t, srv, "/__fake/config", `{"failKeys":null,"latency":"0s"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Empty(t, fake.Config().FailKeys)
	require.Zero(t, fake.Config().Latency)

	// Changing the universe at run time keeps the counts.
	get(t, srv, pathCorpCode, url.Values{"crtfc_key": {"k"}})
	resp, _ = post(t, srv, "/__fake/config", `{"companies":10,"seed":7}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, fake.Companies(), 10)
	require.Equal(t, int64(1), fake.Stats().Total)
}

func TestFailKeys(t *testing.T) {
	t.Parallel()

	fake, srv := startServer(t, Config{Companies: 50})
	fake.SetConfig(Config{Companies: 50, FailKeys: map[string][]string{
		EndpointAptTrade:     {"11110:202501"},
		EndpointCreditLookup: {fake.Companies()[3].CorpCode},
	}})
	for range 5 {
		resp, _ := get(t, srv, pathAptTrade, aptTradeQ("11110", "202501"))
		require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	}
	resp, _ := get(t, srv, pathAptTrade, aptTradeQ("11110", "202502"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = get(t, srv, pathCreditLookup, creditQ(fake.Companies()[3].CorpCode))
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	resp, _ = get(t, srv, pathCreditFallback, creditQ(fake.Companies()[3].CorpCode))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, int64(5), fake.Stats().Calls[EndpointAptTrade]["11110:202501"], "failed calls are counted")
}

func TestInjectedFaults(t *testing.T) {
	t.Parallel()

	_, srv := startServer(t, Config{Companies: 50, Rate429: 1})
	resp, body := get(t, srv, pathStockPrice, stockQ("005930", "20250102"))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Contains(t, string(body), "too many requests")

	// RetryAfter sets the header in whole seconds, rounded up; a negative
	// one leaves it out.
	_, srv = startServer(t, Config{Companies: 50, Rate429: 1, RetryAfter: 2500 * time.Millisecond})
	resp, _ = get(t, srv, pathStockPrice, stockQ("005930", "20250102"))
	require.Equal(t, "3", resp.Header.Get("Retry-After"))
	_, srv = startServer(t, Config{Companies: 50, Rate429: 1, RetryAfter: -1})
	resp, _ = get(t, srv, pathStockPrice, stockQ("005930", "20250102"))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Empty(t, resp.Header.Values("Retry-After"))

	// The same seed gives the same faults for the same calls, and about
	// ErrorRate of them fail.
	statuses := func() []int {
		_, srv := startServer(t, Config{Companies: 50, ErrorRate: 0.3, Rate429: 0.1})
		var out []int
		for i := range 400 {
			resp, _ := get(t, srv, pathCreditFallback, creditQ(strconv.Itoa(10_000_000+i%100)))
			out = append(out, resp.StatusCode)
		}
		return out
	}
	first := statuses()
	require.Equal(t, first, statuses())
	count := func(status int) int {
		return len(slices.DeleteFunc(slices.Clone(first), func(s int) bool { return s != status }))
	}
	require.InDelta(t, 120, count(http.StatusInternalServerError), 40)
	require.InDelta(t, 40, count(http.StatusTooManyRequests), 25)
	require.Equal(t, len(first), count(http.StatusOK)+count(http.StatusInternalServerError)+count(http.StatusTooManyRequests))
}

func TestMissingKey(t *testing.T) {
	t.Parallel()

	fake, srv := startServer(t, Config{Companies: 50})
	corp := fake.Companies()[0].CorpCode

	for _, path := range []string{pathAptTrade, pathStockPrice} {
		resp, body := get(t, srv, path, url.Values{"LAWD_CD": {"11110"}, "DEAL_YMD": {"202501"}, "basDt": {"20250102"}, "resultType": {"json"}})
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Contains(t, string(body), "<returnReasonCode>30</returnReasonCode>", path)
		require.Contains(t, string(body), "SERVICE_KEY_IS_NOT_REGISTERED_ERROR", path)
	}

	resp, body := get(t, srv, pathCorpCode, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "<status>010</status>")

	resp, body = get(t, srv, pathFilingList, url.Values{"crtfc_key": {""}, "corp_code": {corp}})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, `{"status":"010","message":"등록되지 않은 인증키입니다."}`, string(body))

	resp, body = get(t, srv, pathCreditLookup, url.Values{"corpCode": {corp}})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, string(body), `"error":"unauthorized"`)

	require.Equal(t, int64(5), fake.Stats().Total, "refused calls are counted")
}

// QuoteKey refuses every call like an unregistered key, in each provider's
// format, quoting the key raw and URL-encoded.
func TestQuoteKey(t *testing.T) {
	t.Parallel()

	fake, srv := startServer(t, Config{Companies: 50})
	resp, _ := post(t, srv, "/__fake/config", `{"quoteKey":true}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, fake.Config().QuoteKey)
	corp := fake.Companies()[0].CorpCode
	const key = "KEY<&+/=>"
	encoded := url.QueryEscape(key)

	for _, path := range []string{pathAptTrade, pathStockPrice} {
		resp, body := get(t, srv, path, url.Values{"serviceKey": {key}, "LAWD_CD": {"11110"}, "DEAL_YMD": {"202501"}})
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		var g struct {
			Msg  string `xml:"cmmMsgHeader>returnAuthMsg"`
			Code string `xml:"cmmMsgHeader>returnReasonCode"`
		}
		require.NoError(t, xml.Unmarshal(body, &g), path)
		require.Equal(t, "30", g.Code)
		require.Contains(t, g.Msg, "unregistered key "+key+" ("+path+"?")
		require.Contains(t, g.Msg, "serviceKey="+encoded)
	}

	resp, body := get(t, srv, pathCorpCode, url.Values{"crtfc_key": {key}})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var x struct {
		Status  string `xml:"status"`
		Message string `xml:"message"`
	}
	require.NoError(t, xml.Unmarshal(body, &x))
	require.Equal(t, "010", x.Status)
	require.Equal(t, "unregistered key "+key+" ("+pathCorpCode+"?crtfc_key="+encoded+")", x.Message)

	resp, body = get(t, srv, pathFilingList, url.Values{"crtfc_key": {key}, "corp_code": {corp}})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var j dartStatus
	require.NoError(t, json.Unmarshal(body, &j))
	require.Equal(t, "010", j.Status)
	require.Contains(t, j.Message, "unregistered key "+key+" (")
	require.Contains(t, j.Message, "crtfc_key="+encoded)

	resp, body = get(t, srv, pathCreditLookup, url.Values{"apiKey": {key}, "corpCode": {corp}})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, string(body), "apiKey="+encoded)
}

func TestAptTrade(t *testing.T) {
	t.Parallel()

	_, srv := startServer(t, Config{Companies: 50})

	type item struct {
		AptSeq     string `xml:"aptSeq"`
		DealAmount string `xml:"dealAmount"`
	}
	type response struct {
		ResultCode string `xml:"header>resultCode"`
		Items      []item `xml:"body>items>item"`
		TotalCount int    `xml:"body>totalCount"`
	}
	decode := func(body []byte) response {
		var r response
		require.NoError(t, xml.Unmarshal(body, &r))
		return r
	}

	// Find a month with trades, then read it page by page.
	var all response
	ym := ""
	for m := 1; m <= 12 && len(all.Items) < 3; m++ {
		ym = "2025" + strconv.Itoa(100 + m)[1:]
		_, body := get(t, srv, pathAptTrade, aptTradeQ("11680", ym))
		all = decode(body)
		require.Equal(t, "000", all.ResultCode)
		require.Len(t, all.Items, all.TotalCount)
		require.LessOrEqual(t, all.TotalCount, maxTradesPerMonth)
	}
	require.GreaterOrEqual(t, len(all.Items), 3)
	require.Regexp(t, `^[0-9]{1,3}(,[0-9]{3})*$`, all.Items[0].DealAmount)

	var paged []item
	for page := 1; ; page++ {
		q := aptTradeQ("11680", ym)
		q.Set("pageNo", strconv.Itoa(page))
		q.Set("numOfRows", "2")
		_, body := get(t, srv, pathAptTrade, q)
		r := decode(body)
		require.Equal(t, all.TotalCount, r.TotalCount)
		if len(r.Items) == 0 {
			break
		}
		paged = append(paged, r.Items...)
	}
	require.Equal(t, all.Items, paged)

	for _, q := range []url.Values{aptTradeQ("1111", "202501"), aptTradeQ("11110", "202513"), aptTradeQ("11110", "2025-1")} {
		_, body := get(t, srv, pathAptTrade, q)
		require.Equal(t, "10", decode(body).ResultCode, q.Encode())
		require.Contains(t, string(body), "INVALID_REQUEST_PARAMETER_ERROR")
	}
}

func TestCorpCodeOrder(t *testing.T) {
	t.Parallel()

	fake, srv := startServer(t, Config{Companies: 300})
	download := func() []string {
		resp, body := get(t, srv, pathCorpCode, url.Values{"crtfc_key": {"k"}})
		require.Equal(t, "application/zip", resp.Header.Get("Content-Type"))
		zr, err := zip.NewReader(bytes.NewReader(body), int64(len(body)))
		require.NoError(t, err)
		require.Len(t, zr.File, 1)
		require.Equal(t, "CORPCODE.xml", zr.File[0].Name)
		f, err := zr.File[0].Open()
		require.NoError(t, err)
		defer f.Close()
		var doc struct {
			List []struct {
				CorpCode  string `xml:"corp_code"`
				StockCode string `xml:"stock_code"`
			} `xml:"list"`
		}
		require.NoError(t, xml.NewDecoder(f).Decode(&doc))
		var codes []string
		for _, e := range doc.List {
			require.NotEmpty(t, e.StockCode, "unlisted companies have a single space, like DART")
			codes = append(codes, e.CorpCode)
		}
		return codes
	}
	first, second := download(), download()
	require.Len(t, first, 300)
	require.NotEqual(t, first, second, "the order changes between downloads")
	require.ElementsMatch(t, first, second, "the set does not")
	var want []string
	for _, c := range fake.Companies() {
		want = append(want, c.CorpCode)
	}
	require.ElementsMatch(t, want, first)
}

func TestFilingList(t *testing.T) {
	t.Parallel()

	fake, srv := startServer(t, Config{Companies: 400})

	type response struct {
		Status     string   `json:"status"`
		Message    string   `json:"message"`
		TotalCount int      `json:"total_count"`
		TotalPage  int      `json:"total_page"`
		List       []filing `json:"list"`
	}
	list := func(q url.Values) response {
		_, body := get(t, srv, pathFilingList, q)
		var r response
		require.NoError(t, json.Unmarshal(body, &r))
		return r
	}

	distressed := firstCompany(t, fake, func(c Company) bool { return c.Distressed })
	r := list(filingQ(distressed.CorpCode, "20250101", "20251231"))
	require.Equal(t, "000", r.Status)
	require.Equal(t, r.TotalCount, len(r.List))
	seen := map[string]bool{}
	risky := 0
	for i, f := range r.List {
		require.Regexp(t, `^2025[0-9]{10}$`, f.RceptNo)
		require.False(t, seen[f.RceptNo])
		seen[f.RceptNo] = true
		require.Equal(t, f.RceptNo[:8], f.RceptDt)
		if i > 0 {
			require.Greater(t, r.List[i-1].RceptNo, f.RceptNo, "newest first")
		}
		if slices.Contains(riskReports, f.ReportNm) {
			risky++
		}
	}
	require.Positive(t, risky, "a distressed company files risk reports")

	healthy := firstCompany(t, fake, func(c Company) bool { return !c.Distressed && c.StockCode != "" })
	r = list(filingQ(healthy.CorpCode, "20250101", "20251231"))
	for _, f := range r.List {
		require.NotContains(t, riskReports, f.ReportNm)
	}

	q := filingQ(healthy.CorpCode, "20250104", "20250105") // a weekend
	r = list(q)
	require.Equal(t, "013", r.Status)
	require.Equal(t, "조회된 데이타가 없습니다.", r.Message)
	require.Equal(t, "013", list(filingQ("99999999", "20250101", "20251231")).Status)
	require.Equal(t, "100", list(filingQ(healthy.CorpCode, "20251231", "20250101")).Status)
	require.Equal(t, "100", list(filingQ("123", "20250101", "20251231")).Status)
}

func TestStockPrice(t *testing.T) {
	t.Parallel()

	fake, srv := startServer(t, Config{Companies: 500})

	type response struct {
		Response struct {
			Header struct{ ResultCode string }
			Body   struct {
				TotalCount int             `json:"totalCount"`
				Items      json.RawMessage `json:"items"`
			}
		}
	}
	price := func(code string, day time.Time) (response, []stockPriceItem) {
		_, body := get(t, srv, pathStockPrice, stockQ(code, day.Format(krxDate)))
		var r response
		require.NoError(t, json.Unmarshal(body, &r), string(body))
		require.Equal(t, "00", r.Response.Header.ResultCode)
		if string(r.Response.Body.Items) == `""` {
			return r, nil
		}
		var items struct{ Item []stockPriceItem }
		require.NoError(t, json.Unmarshal(r.Response.Body.Items, &items))
		return r, items.Item
	}

	dropper := firstCompany(t, fake, func(c Company) bool { return !c.DropStart.IsZero() })
	for _, holiday := range []string{"20250101", "20250301", "20251225", "20250104", "20250105"} {
		day, err := time.Parse(krxDate, holiday)
		require.NoError(t, err)
		r, items := price(dropper.StockCode, day)
		require.Zero(t, r.Response.Body.TotalCount, holiday)
		require.Nil(t, items, holiday)
	}

	// The stock loses about 40% over its drop window.
	var closes []int64
	for day := dropper.DropStart.AddDate(0, 0, -3); !day.After(dropper.DropStart.AddDate(0, 0, DropDays+3)); day = day.AddDate(0, 0, 1) {
		_, items := price(dropper.StockCode, day)
		if !isTradingDay(day) {
			continue
		}
		require.Len(t, items, 1, day)
		it := items[0]
		require.Equal(t, dropper.StockCode, it.SrtnCd)
		require.Equal(t, dropper.Name, it.ItmsNm)
		closeP, err := strconv.ParseInt(it.Clpr, 10, 64)
		require.NoError(t, err)
		high, _ := strconv.ParseInt(it.Hipr, 10, 64)
		low, _ := strconv.ParseInt(it.Lopr, 10, 64)
		require.GreaterOrEqual(t, high, closeP)
		require.LessOrEqual(t, low, closeP)
		closes = append(closes, closeP)
	}
	peak, trough := slices.Max(closes), slices.Min(closes)
	require.Less(t, float64(trough)/float64(peak), 0.7, "closes %v", closes)

	// An unknown code answers like a holiday.
	r, items := price("999999", time.Date(2025, 3, 4, 0, 0, 0, 0, time.UTC))
	require.Zero(t, r.Response.Body.TotalCount)
	require.Nil(t, items)

	_, body := get(t, srv, pathStockPrice, url.Values{"serviceKey": {"k"}, "basDt": {"2025-03-04"}, "resultType": {"json"}})
	require.Contains(t, string(body), `"resultCode":"10"`)
}

func TestISIN(t *testing.T) {
	t.Parallel()

	require.Equal(t, "KR7005930003", isin("KR700593000"))
	require.Equal(t, "KR7000660001", isin("KR700066000"))
}

func TestCredit(t *testing.T) {
	t.Parallel()

	fake, srv := startServer(t, Config{Companies: 200})
	type grade struct {
		CorpCode, Grade, Outlook, EvaluatedAt, Source string
	}
	read := func(path string, q url.Values) grade {
		resp, body := get(t, srv, path, q)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		var g grade
		require.NoError(t, json.Unmarshal(body, &g))
		return g
	}
	c := fake.Companies()[0]
	lookup := read(pathCreditLookup, creditQ(c.CorpCode))
	require.Contains(t, creditScale, lookup.Grade)
	require.Equal(t, c.CorpCode, lookup.CorpCode)
	fallback := read(pathCreditFallback, creditQ(c.CorpCode))
	require.Equal(t, lookup.Grade, fallback.Grade)
	require.Equal(t, "crawl", fallback.Source)

	// Some companies are downgraded on a date.
	moved := 0
	for _, c := range fake.Companies() {
		q := creditQ(c.CorpCode)
		before := read(pathCreditFallback, q)
		q.Set("date", "20270101")
		after := read(pathCreditFallback, q)
		if before.Grade != after.Grade {
			moved++
			require.Greater(t, slices.Index(creditScale, after.Grade), slices.Index(creditScale, before.Grade))
		}
	}
	require.Positive(t, moved)

	fake.SetConfig(Config{Companies: 200, EmptyRate: 1})
	require.Empty(t, read(pathCreditLookup, creditQ(c.CorpCode)).Grade)
	require.NotEmpty(t, read(pathCreditFallback, creditQ(c.CorpCode)).Grade)

	resp, body := get(t, srv, pathCreditLookup, creditQ("12"))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(body), "invalid_request")
}

func TestLatencyRespectsCancellation(t *testing.T) {
	t.Parallel()

	_, srv := startServer(t, Config{Companies: 50, Latency: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+pathCorpCode+"?crtfc_key=k", nil)
	require.NoError(t, err)
	start := time.Now()
	_, err = srv.Client().Do(req)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "err = %v", err)
	require.Less(t, time.Since(start), 2*time.Second)
}

func TestConcurrentCalls(t *testing.T) {
	t.Parallel()

	fake, srv := startServer(t, Config{Companies: 100, Latency: time.Millisecond, ErrorRate: 0.1})
	const workers, perWorker = 32, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				q := creditQ(strconv.Itoa(10_000_000 + (w*perWorker+i)%37))
				resp, err := srv.Client().Get(srv.URL + pathCreditLookup + "?" + q.Encode())
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	st := fake.Stats()
	require.Equal(t, int64(workers*perWorker), st.Total)
	var sum int64
	for _, n := range st.Calls[EndpointCreditLookup] {
		sum += n
	}
	require.Equal(t, st.Total, sum)
	require.Len(t, st.Calls[EndpointCreditLookup], 37)
}

// BenchmarkProviderCalls measures the fake's own cost per call (no latency,
// no network), endpoint by endpoint, with parallel callers.
func BenchmarkProviderCalls(b *testing.B) {
	fake := New(Config{})
	company := fake.Companies()[0]
	listed := fake.Companies()[slices.IndexFunc(fake.Companies(), func(c Company) bool { return c.StockCode != "" })]
	for _, bc := range []struct {
		name string
		path string
		q    url.Values
	}{
		{"aptTrade", pathAptTrade, aptTradeQ("11680", "202503")},
		{"filingList", pathFilingList, filingQ(company.CorpCode, "20250101", "20250331")},
		{"stockPrice", pathStockPrice, stockQ(listed.StockCode, "20261127")},
		{"creditLookup", pathCreditLookup, creditQ(company.CorpCode)},
		{"corpCode", pathCorpCode, url.Values{"crtfc_key": {"k"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			target := bc.path + "?" + bc.q.Encode()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					rec := httptest.NewRecorder()
					fake.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
					if rec.Code != http.StatusOK {
						b.Fatalf("status %d", rec.Code)
					}
				}
			})
		})
	}
}

// QuoteKeyForms refuses every call like QuoteKey, quoting the key it
// received in every form of QuotedKeyForms, the decoded form of a
// percent-encoded key among them.
func TestQuoteKeyForms(t *testing.T) {
	t.Parallel()

	fake, srv := startServer(t, Config{Companies: 50})
	resp, _ := post(t, srv, "/__fake/config", `{"quoteKeyForms":true}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, fake.Config().QuoteKeyForms)
	const key = "Zq81kEYencoded%2Ba%2Fb%3D9xPp"
	resp, body := get(t, srv, pathCorpCode, url.Values{"crtfc_key": {key}})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var x struct {
		Message string `xml:"message"`
	}
	require.NoError(t, xml.Unmarshal(body, &x))
	forms := QuotedKeyForms(key, pathCorpCode+"?crtfc_key="+url.QueryEscape(key))
	require.Len(t, forms, 17) // 12 forms, 4 misaligned base64, the decoded key
	for _, f := range forms {
		require.Contains(t, x.Message, f.Name+"=["+f.Text+"]")
		require.Contains(t, f.Text, f.Carried)
	}
	require.Contains(t, x.Message, "decoded=[Zq81kEYencoded+a/b=9xPp]")
}
