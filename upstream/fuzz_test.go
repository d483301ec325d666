package upstream_test

import (
	"archive/zip"
	"bytes"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

var (
	corpCodeRE = regexp.MustCompile(`^[0-9]{8}$`)
	lawdRE     = regexp.MustCompile(`^[0-9]{5}$`)
)

// fakeBody returns what the fake upstream answers on path.
func fakeBody(f *testing.F, path string) []byte {
	f.Helper()
	fake := fakeupstream.New(fakeupstream.Config{Companies: 30})
	rec := httptest.NewRecorder()
	fake.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		f.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// MOLIT's XML: no panic; what parses is a trade of the asked region.
func FuzzParseAptTrades(f *testing.F) {
	f.Add(fakeBody(f, "/1613000/RTMSDataSvcAptTrade/getRTMSDataSvcAptTrade?LAWD_CD=11110&DEAL_YMD=202501&serviceKey=k&pageNo=1&numOfRows=10"))
	f.Add([]byte(`<OpenAPI_ServiceResponse><cmmMsgHeader><returnReasonCode>30</returnReasonCode></cmmMsgHeader></OpenAPI_ServiceResponse>`))
	f.Add([]byte(`<response><header><resultCode>000</resultCode></header><body><items><item><dealAmount>1,0</dealAmount></item></items><totalCount>-1</totalCount></body></response>`))
	f.Fuzz(func(t *testing.T, body []byte) {
		trades, total, err := upstream.ParseAptTrades("11110", "202501", body)
		if err != nil {
			return
		}
		if total < 0 {
			t.Fatalf("negative totalCount %d", total)
		}
		for _, tr := range trades {
			if !lawdRE.MatchString(tr.Region) {
				t.Fatalf("trade with region %q", tr.Region)
			}
		}
	})
}

// DART's filing list JSON: no panic; page counts are never negative.
func FuzzParseFilingList(f *testing.F) {
	f.Add(fakeBody(f, "/api/list.json?crtfc_key=k&corp_code=00126380&bgn_de=20250101&end_de=20250331&page_no=1&page_count=100"))
	f.Add([]byte(`{"status":"013","message":"no data"}`))
	f.Add([]byte(`{"status":"000","total_page":"x","list":[{"rcept_no":""}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		filings, pages, err := upstream.ParseFilingList(body)
		if err != nil {
			return
		}
		if pages < 0 {
			t.Fatalf("negative total_page %d", pages)
		}
		for _, fl := range filings {
			if fl.ReceiptNo == "" {
				t.Fatalf("filing without receipt number: %+v", fl)
			}
		}
	})
}

// KRX's JSON: no panic; prices that parse are positive.
func FuzzParseStockPrice(f *testing.F) {
	f.Add(fakeBody(f, "/1160100/service/GetStockSecuritiesInfoService/getStockPriceInfo?serviceKey=k&basDt=20250314&likeSrtnCd=005930&numOfRows=1&pageNo=1&resultType=json"))
	f.Add([]byte(`{"response":{"header":{"resultCode":"00"},"body":{"items":""}}}`))
	f.Add([]byte(`{"response":{"body":{"items":{"item":[{"clpr":"-1"}]}}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		prices, err := upstream.ParseStockPrice(body)
		if err != nil {
			return
		}
		for _, p := range prices {
			if p.Close <= 0 {
				t.Fatalf("non-positive close %+v", p)
			}
		}
	})
}

// The credit bureau's JSON: no panic; a grade that parses is a known one.
func FuzzParseCreditGrade(f *testing.F) {
	f.Add(fakeBody(f, "/credit/v1/grades?apiKey=k&corpCode=00126380&date=20250314"))
	f.Add([]byte(`{"corpCode":"00126380","grade":"ZZ"}`))
	f.Add([]byte(`{"error":"bad key"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		g, err := upstream.ParseCreditGrade(body)
		if err != nil || g.Grade == "" {
			return
		}
		if upstream.GradeRank(g.Grade) < 0 {
			t.Fatalf("unknown grade accepted: %+v", g)
		}
	})
}

// DART's corp-code archive (a zip holding CORPCODE.xml): no panic; every
// company read has an 8-digit corp code.
func FuzzParseCorpCodeZip(f *testing.F) {
	f.Add(fakeBody(f, "/api/corpCode.xml?crtfc_key=k"))
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create("CORPCODE.xml")
	_, _ = w.Write([]byte(`<result><list><corp_code>123</corp_code><corp_name>x</corp_name></list></result>`))
	_ = zw.Close()
	f.Add(buf.Bytes())
	f.Add([]byte("PK\x03\x04 not a zip"))
	f.Fuzz(func(t *testing.T, body []byte) {
		codes, err := upstream.ParseCorpCodeZip(bytes.NewReader(body), int64(len(body)))
		if err != nil {
			return
		}
		for _, c := range codes {
			if !corpCodeRE.MatchString(c.CorpCode) {
				t.Fatalf("corp code %q accepted", c.CorpCode)
			}
		}
	})
}
