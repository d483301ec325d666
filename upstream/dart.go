package upstream

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// DART status codes with a meaning of their own.
const (
	// dartOK is the status of a successful answer.
	dartOK = "000"

	// dartNoData is the status of a search that found nothing; it is an
	// empty answer, not an error.
	dartNoData = "013"
)

// dartDateLayout is the layout of DART's dates (bgn_de, rcept_dt, ...).
const dartDateLayout = "20060102"

// dartError returns the APIError for a DART status other than "000" and
// "013".
func dartError(ep Endpoint, status, msg string) error {
	var kind error
	switch status {
	case "010", "011", "012", "901":
		kind = ErrKeyRejected // unregistered, unusable, IP not allowed, account expired
	case "020":
		kind = ErrQuotaExceeded
	case "014", "021", "100", "101":
		kind = ErrInvalidRequest // no such file, too many companies, bad field, bad access
	case "800", "900":
		kind = ErrProviderFailure // maintenance, undefined error
	}
	return &APIError{Endpoint: ep, Code: status, Message: msg, Kind: kind}
}

// CorpCode is one company of DART's corp code archive.
type CorpCode struct {
	// CorpCode is DART's 8-digit company identifier (고유번호).
	CorpCode string

	// Name is the company's Korean name.
	Name string

	// EngName is the company's English name, often empty.
	EngName string

	// StockCode is the 6-digit listing code, or "" when the company is not
	// listed (DART sends a single space).
	StockCode string

	// ModifyDate is the date DART last changed the entry, as YYYYMMDD.
	ModifyDate string
}

// CorpCodeQuery returns the query (without the API key) downloading the
// corp code archive. It has no parameters of its own.
func CorpCodeQuery() url.Values { return url.Values{} }

// corpCodeFileName is the XML file inside the corp code archive.
const corpCodeFileName = "CORPCODE.xml"

// ReadCorpCodesZip streams the companies of the corp code archive held by r
// (size bytes) to fn, in archive order, and stops at fn's first error, which
// it returns wrapped. The archive can hold about 100,000 companies, so it is
// decoded one entry at a time and never held in memory whole. When r holds
// DART's XML or JSON status answer instead of a zip file (for example status
// "010" for an unregistered key), that status is returned as an *APIError.
func ReadCorpCodesZip(r io.ReaderAt, size int64, fn func(CorpCode) error) error {
	ep := EndpointCorpCode
	zr, err := zip.NewReader(r, size)
	if err != nil {
		if statusErr := corpCodeStatus(r, size); statusErr != nil {
			return statusErr
		}
		return fmt.Errorf("%s: open archive: %w", ep, err)
	}
	var file *zip.File
	for _, f := range zr.File {
		if strings.EqualFold(f.Name, corpCodeFileName) {
			file = f
			break
		}
	}
	if file == nil {
		return fmt.Errorf("%s: archive has no %s", ep, corpCodeFileName)
	}
	rc, err := file.Open()
	if err != nil {
		return fmt.Errorf("%s: open %s: %w", ep, file.Name, err)
	}
	defer rc.Close()

	dec := xml.NewDecoder(rc)
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: decode %s: %w", ep, file.Name, err)
		}
		start, ok := tok.(xml.StartElement)
		if !ok || start.Name.Local != "list" {
			continue
		}
		var entry struct {
			CorpCode    string `xml:"corp_code"`
			CorpName    string `xml:"corp_name"`
			CorpEngName string `xml:"corp_eng_name"`
			StockCode   string `xml:"stock_code"`
			ModifyDate  string `xml:"modify_date"`
		}
		if err := dec.DecodeElement(&entry, &start); err != nil {
			return fmt.Errorf("%s: decode %s: %w", ep, file.Name, err)
		}
		c := CorpCode{
			CorpCode:   strings.TrimSpace(entry.CorpCode),
			Name:       strings.TrimSpace(entry.CorpName),
			EngName:    strings.TrimSpace(entry.CorpEngName),
			StockCode:  strings.TrimSpace(entry.StockCode),
			ModifyDate: strings.TrimSpace(entry.ModifyDate),
		}
		if c.CorpCode == "" {
			return fmt.Errorf("%s: entry without corp_code", ep)
		}
		if !isCorpCode(c.CorpCode) {
			return fmt.Errorf("%s: corp_code %s is not 8 digits", ep, providerValue(c.CorpCode))
		}
		if err := fn(c); err != nil {
			return fmt.Errorf("%s: corp code %s: %w", ep, c.CorpCode, err)
		}
	}
}

// corpCodeStatus reads DART's status answer (XML <result><status> or JSON
// {"status":...}), sent instead of the archive on a refusal, and returns it
// as an error. It returns nil when r holds no such answer.
func corpCodeStatus(r io.ReaderAt, size int64) error {
	const maxStatusBody = 64 << 10
	if size <= 0 || size > maxStatusBody {
		return nil
	}
	body := make([]byte, size)
	if _, err := r.ReadAt(body, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	var status struct {
		Status  string `xml:"status" json:"status"`
		Message string `xml:"message" json:"message"`
	}
	trimmed := bytes.TrimSpace(body)
	switch {
	case bytes.HasPrefix(trimmed, []byte("{")):
		if json.Unmarshal(trimmed, &status) != nil {
			return nil
		}
	case bytes.HasPrefix(trimmed, []byte("<")):
		if xml.Unmarshal(trimmed, &status) != nil {
			return nil
		}
	default:
		return nil
	}
	if status.Status == "" {
		return nil
	}
	if status.Status == dartOK {
		return fmt.Errorf("%s: status %s answer without an archive", EndpointCorpCode, status.Status)
	}
	return dartError(EndpointCorpCode, status.Status, status.Message)
}

// ReadCorpCodes streams the companies of the corp code archive saved at path
// to fn, like ReadCorpCodesZip.
func ReadCorpCodes(path string, fn func(CorpCode) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open corp code archive: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat corp code archive: %w", err)
	}
	return ReadCorpCodesZip(f, info.Size(), fn)
}

// Filing is one disclosure listed by DART's filing search.
type Filing struct {
	// CorpCode is the filing company's DART code.
	CorpCode string

	// CorpName is the filing company's name.
	CorpName string

	// StockCode is the company's listing code, "" when unlisted.
	StockCode string

	// CorpClass is the market: "Y" KOSPI, "K" KOSDAQ, "N" KONEX, "E" other.
	CorpClass string

	// ReportName is the report's title (report_nm), the field risk rules
	// match against.
	ReportName string

	// ReceiptNo is DART's unique 14-digit receipt number (rcept_no).
	ReceiptNo string

	// FilerName is who filed the report (flr_nm).
	FilerName string

	// ReceiptDate is the filing date, as YYYYMMDD.
	ReceiptDate string

	// Remark holds DART's remark flags (rm), such as "유" or "코".
	Remark string
}

// ReceivedAt returns ReceiptDate as a date at midnight UTC.
func (f Filing) ReceivedAt() (time.Time, error) {
	t, err := time.Parse(dartDateLayout, f.ReceiptDate)
	if err != nil {
		return time.Time{}, fmt.Errorf("filing %s: bad receipt date: %w", f.ReceiptNo, err)
	}
	return t, nil
}

// FilingListQuery returns the query (without the API key) asking for one
// page of corpCode's filings received from the date from through the date
// to (inclusive, calendar dates as in Korea). DART allows at most 100
// filings per page.
func FilingListQuery(corpCode string, from, to time.Time, pageNo, pageCount int) url.Values {
	return url.Values{
		"corp_code":  {corpCode},
		"bgn_de":     {from.Format(dartDateLayout)},
		"end_de":     {to.Format(dartDateLayout)},
		"page_no":    {strconv.Itoa(pageNo)},
		"page_count": {strconv.Itoa(pageCount)},
	}
}

// filingListResponse is the JSON answer of EndpointFilingList.
type filingListResponse struct {
	Status     string     `json:"status"`
	Message    string     `json:"message"`
	PageNo     flexString `json:"page_no"`
	PageCount  flexString `json:"page_count"`
	TotalCount flexString `json:"total_count"`
	TotalPage  flexString `json:"total_page"`
	List       []struct {
		CorpCode  string `json:"corp_code"`
		CorpName  string `json:"corp_name"`
		StockCode string `json:"stock_code"`
		CorpCls   string `json:"corp_cls"`
		ReportNm  string `json:"report_nm"`
		RceptNo   string `json:"rcept_no"`
		FlrNm     string `json:"flr_nm"`
		RceptDt   string `json:"rcept_dt"`
		Rm        string `json:"rm"`
	} `json:"list"`
}

// FilingPage is one page of EndpointFilingList's answer.
type FilingPage struct {
	Filings []Filing
	// TotalCount is the number of filings over all pages as DART declares
	// it (total_count), TotalPages the number of pages (total_page).
	TotalCount, TotalPages int
}

// ParseFilingPage decodes one page of EndpointFilingList's answer into the
// filings on it, the number of pages and DART's declared total_count, which
// a paged reader needs to tell a short page from the last one (see
// FetchPages). A page of status "000" without total_count is an error.
func ParseFilingPage(body []byte) (FilingPage, error) {
	filings, totalPages, totalCount, err := parseFilingPage(body)
	if err == nil && totalCount < 0 {
		err = fmt.Errorf("%s: response has no total_count", EndpointFilingList)
	}
	return FilingPage{Filings: filings, TotalCount: totalCount, TotalPages: totalPages}, err
}

// parseFilingPage decodes one page; totalCount is -1 when the answer has
// none.

func parseFilingPage(body []byte) (filings []Filing, totalPages, totalCount int, err error) {
	ep := EndpointFilingList
	var resp filingListResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, 0, 0, fmt.Errorf("%s: decode response: %w", ep, err)
	}
	switch resp.Status {
	case dartOK:
	case dartNoData:
		return nil, 0, 0, nil
	case "":
		return nil, 0, 0, fmt.Errorf("%s: response has no status", ep)
	default:
		return nil, 0, 0, dartError(ep, resp.Status, resp.Message)
	}
	if totalPages, err = resp.TotalPage.int(); err != nil {
		return nil, 0, 0, fmt.Errorf("%s: bad total_page: %w", ep, err)
	}
	countGiven := len(resp.TotalCount) > 0
	if countGiven {
		if totalCount, err = resp.TotalCount.int(); err != nil {
			return nil, 0, 0, fmt.Errorf("%s: bad total_count: %w", ep, err)
		}
	}
	if totalPages < 0 {
		return nil, 0, 0, fmt.Errorf("%s: bad total_page %d", ep, totalPages)
	}
	filings = make([]Filing, 0, len(resp.List))
	for _, it := range resp.List {
		f := Filing{
			CorpCode:    strings.TrimSpace(it.CorpCode),
			CorpName:    strings.TrimSpace(it.CorpName),
			StockCode:   strings.TrimSpace(it.StockCode),
			CorpClass:   strings.TrimSpace(it.CorpCls),
			ReportName:  strings.TrimSpace(it.ReportNm),
			ReceiptNo:   strings.TrimSpace(it.RceptNo),
			FilerName:   strings.TrimSpace(it.FlrNm),
			ReceiptDate: strings.TrimSpace(it.RceptDt),
			Remark:      strings.TrimSpace(it.Rm),
		}
		if f.ReceiptNo == "" {
			return nil, 0, 0, fmt.Errorf("%s: filing without rcept_no", ep)
		}
		if _, err := f.ReceivedAt(); err != nil {
			return nil, 0, 0, fmt.Errorf("%s: %w", ep, err)
		}
		filings = append(filings, f)
	}
	if !countGiven {
		totalCount = -1
	}
	return filings, totalPages, totalCount, nil
}

// flexString is a JSON value sent sometimes as a string and sometimes as a
// number (data.go.kr and DART are not consistent about it), kept as text.
type flexString string

// UnmarshalJSON accepts a JSON string, number or null.
func (s *flexString) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*s = ""
	case len(b) > 0 && b[0] == '"':
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return fmt.Errorf("decode string: %w", err)
		}
		*s = flexString(strings.TrimSpace(str))
	default:
		var n json.Number
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("decode number: %w", err)
		}
		*s = flexString(n)
	}
	return nil
}

// int parses the value as an integer; "" is 0.
func (s flexString) int() (int, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(string(s))
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", providerValue(string(s)), numberError(err))
	}
	return n, nil
}

// isCorpCode reports whether s is a DART corp code: 8 digits.
func isCorpCode(s string) bool {
	if len(s) != 8 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// maxQuotedProviderValue is the longest provider value an error quotes.
const maxQuotedProviderValue = 40

// providerValue quotes a value a provider sent, for an error: whole when
// it is at most maxQuotedProviderValue bytes, else only its length. It is
// never cut: the error's text goes through the worker's key scrubber
// afterwards, which finds a key only in what it is shown, so a value cut
// short would keep most of a key a hostile provider put there.
func providerValue(s string) string {
	if len(s) <= maxQuotedProviderValue {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("of %d bytes", len(s))
}

// numberError returns the cause of a strconv error without the text it
// parsed, which strconv quotes whole: the value is quoted by providerValue.
func numberError(err error) error {
	var numErr *strconv.NumError
	if errors.As(err, &numErr) {
		return numErr.Err
	}
	return err
}
