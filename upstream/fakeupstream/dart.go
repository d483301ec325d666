package fakeupstream

import (
	"archive/zip"
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Paths of DART's endpoints.
const (
	pathCorpCode   = "/api/corpCode.xml"
	pathFilingList = "/api/list.json"
)

// dartDate is the layout of DART's dates.
const dartDate = "20060102"

// DART's messages for the statuses the fake sends.
const (
	dartMsgOK      = "정상"
	dartMsgNoKey   = "등록되지 않은 인증키입니다."
	dartMsgNoData  = "조회된 데이타가 없습니다."
	dartMsgBadArgs = "필드의 부적절한 값입니다. 필드 설명에 없는 값을 사용한 경우에 발생하는 메시지입니다."
)

// writeDARTXMLKeyError answers a corp-code download without a key like DART
// answers an unregistered key: HTTP 200 and an XML status 010 instead of
// the archive. msg replaces DART's own message when it is not "".
func writeDARTXMLKeyError(w http.ResponseWriter, msg string) {
	var escaped bytes.Buffer
	_ = xml.EscapeText(&escaped, []byte(cmp.Or(msg, dartMsgNoKey)))
	writeBody(w, http.StatusOK, "application/xml;charset=UTF-8", []byte(
		`<?xml version="1.0" encoding="UTF-8"?><result><status>010</status><message>`+escaped.String()+`</message></result>`))
}

// writeDARTJSONKeyError answers a JSON call without a key like DART answers
// an unregistered key: HTTP 200 and status 010. msg replaces DART's own
// message when it is not "".
func writeDARTJSONKeyError(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusOK, dartStatus{Status: "010", Message: cmp.Or(msg, dartMsgNoKey)})
}

// dartStatus is a DART answer without data.
type dartStatus struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// serveCorpCode answers DART's corp-code download: a zip holding
// CORPCODE.xml with every company. Like the real archive's, the order of
// the list differs between downloads (it is shuffled by the seed and the
// download count); the set is the same.
func (s *Server) serveCorpCode(w http.ResponseWriter, c *call) {
	u := c.st.u
	order := newRand(newHasher(c.st.cfg.Seed).str("corpCodeOrder").num(c.n)).Perm(len(u.companies))

	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	f, err := zw.CreateHeader(&zip.FileHeader{Name: "CORPCODE.xml", Method: zip.Deflate, Modified: time.Date(2025, 1, 10, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		http.Error(w, "create archive entry: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if _, err := f.Write([]byte("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<result>\n")); err != nil {
		http.Error(w, "write archive: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if c.st.cfg.CorpNameQuotesKey {
		var name bytes.Buffer
		_ = xml.EscapeText(&name, []byte("Z"+c.q.Get("crtfc_key")))
		if _, err := fmt.Fprintf(f, "<list><corp_code>1234567x</corp_code><corp_name>%s</corp_name></list>\n", name.String()); err != nil {
			http.Error(w, "write archive: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	for _, i := range order {
		if _, err := f.Write(u.corpXML[i]); err != nil {
			http.Error(w, "write archive: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	if _, err := f.Write([]byte("</result>\n")); err != nil {
		http.Error(w, "write archive: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if err := zw.Close(); err != nil {
		http.Error(w, "close archive: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Disposition", `attachment; filename="CORPCODE.zip"`)
	writeBody(w, http.StatusOK, "application/zip", buf.Bytes())
}

// filing is one generated DART filing, in list.json's form.
type filing struct {
	CorpCode  string `json:"corp_code"`
	CorpName  string `json:"corp_name"`
	StockCode string `json:"stock_code"`
	CorpCls   string `json:"corp_cls"`
	ReportNm  string `json:"report_nm"`
	RceptNo   string `json:"rcept_no"`
	FlrNm     string `json:"flr_nm"`
	RceptDt   string `json:"rcept_dt"`
	Rm        string `json:"rm"`
}

// Report names of generated filings. A %s stands for the reporting period.
var (
	listedReports = []string{
		"분기보고서 (%s)",
		"주요사항보고서(자기주식취득결정)",
		"임원ㆍ주요주주특정증권등소유상황보고서",
		"최대주주등소유주식변동신고서",
		"주식등의대량보유상황보고서(일반)",
		"단일판매ㆍ공급계약체결",
		"기업설명회(IR)개최(안내공시)",
		"현금ㆍ현물배당결정",
		"감사보고서제출(감사의견 적정)",
		"[기재정정]단일판매ㆍ공급계약체결",
	}
	unlistedReports = []string{
		"감사보고서 (%s)",
		"연결감사보고서 (%s)",
		"[기재정정]감사보고서 (%s)",
	}
	// riskReports are what distressed companies file, and what the radar
	// looks for.
	riskReports = []string{
		"부도발생",
		"회생절차개시신청",
		"영업정지",
		"감사보고서제출(감사의견 한정)",
		"감사보고서제출(감사의견 부적정)",
		"감사보고서제출(감사의견 의견거절)",
		"소송등의제기",
	}
	// personFilers file ownership reports instead of the company.
	personFilers = []string{"김민준", "이서연", "박지훈", "최유진", "정다은", "국민연금공단"}
)

// Filing rates per weekday.
const (
	listedFilingRate   = 0.05
	unlistedFilingRate = 0.01
	riskFilingRate     = 0.03 // for distressed companies, on top of the routine ones
	maxFilingsPerDay   = 4    // keeps rcept_no unique: the serial is index*4+n
)

// filingsOn generates the filings company c (at index idx of the universe)
// makes on day. Nothing is filed on weekends.
func filingsOn(seed int64, c *Company, idx int, day time.Time) []filing {
	if wd := day.Weekday(); wd == time.Saturday || wd == time.Sunday {
		return nil
	}
	date := day.Format(dartDate)
	rng := newRand(newHasher(seed).str("filing").str(c.CorpCode).str(date))
	var names []string
	u := rng.Float64()
	if c.StockCode != "" {
		switch {
		case u < listedFilingRate*0.2:
			names = append(names, pick(rng.IntN, listedReports), pick(rng.IntN, listedReports))
		case u < listedFilingRate:
			names = append(names, pick(rng.IntN, listedReports))
		}
	} else if u < unlistedFilingRate {
		names = append(names, pick(rng.IntN, unlistedReports))
	}
	if c.Distressed && rng.Float64() < riskFilingRate {
		names = append(names, pick(rng.IntN, riskReports))
	}
	cls, rm := "E", ""
	switch c.Market {
	case "KOSPI":
		cls, rm = "Y", "유"
	case "KOSDAQ":
		cls, rm = "K", "코"
	}
	period := quarterBefore(day)
	out := make([]filing, 0, len(names))
	for j, name := range names[:min(len(names), maxFilingsPerDay)] {
		if strings.Contains(name, "%s") {
			name = fmt.Sprintf(name, period)
		}
		filer := c.Name
		if strings.HasPrefix(name, "임원") || strings.HasPrefix(name, "주식등의대량보유") {
			filer = personFilers[rng.IntN(len(personFilers))]
		}
		out = append(out, filing{
			CorpCode:  c.CorpCode,
			CorpName:  c.Name,
			StockCode: c.StockCode,
			CorpCls:   cls,
			ReportNm:  name,
			RceptNo:   fmt.Sprintf("%s%06d", date, idx*maxFilingsPerDay+j),
			FlrNm:     filer,
			RceptDt:   date,
			Rm:        rm,
		})
	}
	return out
}

// pick returns a random element of list.
func pick(intN func(int) int, list []string) string { return list[intN(len(list))] }

// quarterBefore returns the last quarter end before day, as "YYYY.MM".
func quarterBefore(day time.Time) string {
	q := (int(day.Month())-1)/3*3 + 1 // first month of day's quarter
	end := time.Date(day.Year(), time.Month(q), 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, -1)
	return end.Format("2006.01")
}

// maxFilingRangeDays bounds bgn_de..end_de, so that one call cannot make
// the fake generate for ever.
const maxFilingRangeDays = 20 * 366

// serveFilingList answers DART's filing search for one company and period.
// Unlike DART, corp_code, bgn_de and end_de are required.
func (s *Server) serveFilingList(w http.ResponseWriter, c *call) {
	corpCode := c.q.Get("corp_code")
	from, errFrom := time.Parse(dartDate, c.q.Get("bgn_de"))
	to, errTo := time.Parse(dartDate, c.q.Get("end_de"))
	pageNo, okPage := positiveParam(c.q.Get("page_no"), 1)
	pageCount, okCount := positiveParam(c.q.Get("page_count"), 10)
	if !isDigits(corpCode, 8) || errFrom != nil || errTo != nil || from.After(to) ||
		to.Sub(from) > maxFilingRangeDays*24*time.Hour || !okPage || !okCount || pageCount > 100 {
		writeJSON(w, http.StatusOK, dartStatus{Status: "100", Message: dartMsgBadArgs})
		return
	}
	company, idx, ok := c.st.u.company(corpCode)
	if !ok {
		writeJSON(w, http.StatusOK, dartStatus{Status: "013", Message: dartMsgNoData})
		return
	}
	var filings []filing
	for day := to; !day.Before(from); day = day.AddDate(0, 0, -1) {
		dayFilings := filingsOn(c.st.cfg.Seed, company, idx, day)
		slices.Reverse(dayFilings) // newest first, like DART
		filings = append(filings, dayFilings...)
	}
	if len(filings) == 0 {
		writeJSON(w, http.StatusOK, dartStatus{Status: "013", Message: dartMsgNoData})
		return
	}
	page := shorten(c, pageOf(filings, pageNo, pageCount))
	if page == nil {
		page = []filing{}
	}
	writeJSON(w, http.StatusOK, struct {
		Status     string   `json:"status"`
		Message    string   `json:"message"`
		PageNo     int      `json:"page_no"`
		PageCount  int      `json:"page_count"`
		TotalCount int      `json:"total_count"`
		TotalPage  int      `json:"total_page"`
		List       []filing `json:"list"`
	}{
		Status:     "000",
		Message:    dartMsgOK,
		PageNo:     pageNo,
		PageCount:  pageCount,
		TotalCount: len(filings),
		TotalPage:  (len(filings) + pageCount - 1) / pageCount,
		List:       page,
	})
}
