package upstream

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// This file holds what every endpoint shares (Endpoint, APIError and its
// sentinels, the data.go.kr gateway error format) and the MOLIT apartment
// trade endpoint.

// Endpoint describes one provider endpoint: who serves it, the name it is
// counted under (by the fake upstream server and the external-call metrics)
// and its path below the provider's base URL. The API key is not part of any
// query a builder in this package returns: the client adds it under
// Provider.KeyParam().
type Endpoint struct {
	// Provider serves the endpoint and owns the API key it needs.
	Provider Provider

	// Name identifies the endpoint in metrics, logs and the fake upstream
	// server's call counts, for example "aptTrade".
	Name string

	// Path is the request path below the provider's base URL.
	Path string

	// KeyParams are the query parameters that identify one call, in order.
	// CallKey joins their values with ":"; no parameters means the endpoint
	// has a single call, keyed "all".
	KeyParams []string
}

// CallKey returns the key identifying the call made with query q: the values
// of the endpoint's KeyParams joined with ":", or "all" when the endpoint has
// none. The fake upstream server counts calls and injects targeted faults by
// this key, so tests can predict and target calls.
func (e Endpoint) CallKey(q url.Values) string {
	if len(e.KeyParams) == 0 {
		return "all"
	}
	vals := make([]string, len(e.KeyParams))
	for i, p := range e.KeyParams {
		vals[i] = q.Get(p)
	}
	return strings.Join(vals, ":")
}

// String returns "PROVIDER/name", as used in error messages.
func (e Endpoint) String() string { return string(e.Provider) + "/" + e.Name }

// The endpoints buildrisk-radar calls.
var (
	// EndpointAptTrade is MOLIT's apartment trade report service
	// (국토교통부 아파트 매매 실거래가 자료).
	EndpointAptTrade = Endpoint{
		Provider:  ProviderMOLIT,
		Name:      "aptTrade",
		Path:      "/1613000/RTMSDataSvcAptTrade/getRTMSDataSvcAptTrade",
		KeyParams: []string{"LAWD_CD", "DEAL_YMD"},
	}

	// EndpointCorpCode is DART's archive of every company's corp code
	// (고유번호), a zip file holding CORPCODE.xml.
	EndpointCorpCode = Endpoint{
		Provider: ProviderDART,
		Name:     "corpCode",
		Path:     "/api/corpCode.xml",
	}

	// EndpointFilingList is DART's filing search (공시검색, list.json).
	EndpointFilingList = Endpoint{
		Provider:  ProviderDART,
		Name:      "filingList",
		Path:      "/api/list.json",
		KeyParams: []string{"corp_code", "bgn_de", "end_de", "page_no"},
	}

	// EndpointStockPrice is the Financial Services Commission's daily stock
	// price service (금융위원회 주식시세정보), the KRX provider.
	EndpointStockPrice = Endpoint{
		Provider:  ProviderKRX,
		Name:      "stockPrice",
		Path:      "/1160100/service/GetStockSecuritiesInfoService/getStockPriceInfo",
		KeyParams: []string{"likeSrtnCd", "basDt"},
	}

	// EndpointCreditLookup is the credit rating provider's grade lookup. It
	// may answer with an empty grade, in which case the job asks
	// EndpointCreditFallback.
	EndpointCreditLookup = Endpoint{
		Provider:  ProviderCREDIT,
		Name:      "creditLookup",
		Path:      "/credit/v1/grades",
		KeyParams: []string{"corpCode"},
	}

	// EndpointCreditFallback is the credit rating provider's slower crawl of
	// published ratings, which always answers with a grade.
	EndpointCreditFallback = Endpoint{
		Provider:  ProviderCREDIT,
		Name:      "creditFallback",
		Path:      "/credit/v1/crawl",
		KeyParams: []string{"corpCode"},
	}
)

// Endpoints lists every endpoint in a stable order.
var Endpoints = []Endpoint{
	EndpointAptTrade,
	EndpointCorpCode,
	EndpointFilingList,
	EndpointStockPrice,
	EndpointCreditLookup,
	EndpointCreditFallback,
}

// Sentinel errors an *APIError unwraps to, so that callers can tell with
// errors.Is what to do about a provider's refusal without knowing its codes.
var (
	// ErrKeyRejected means the provider refused the API key: missing,
	// unregistered, expired or used from an unregistered IP. Retrying does
	// not help.
	ErrKeyRejected = errors.New("api key rejected")

	// ErrQuotaExceeded means the provider's own request limit for the key is
	// used up. Retrying before the limit resets does not help.
	ErrQuotaExceeded = errors.New("provider request limit exceeded")

	// ErrInvalidRequest means the provider rejected the request's
	// parameters. Retrying the same request does not help.
	ErrInvalidRequest = errors.New("invalid request")

	// ErrProviderFailure means the provider reported an internal failure or
	// maintenance. A later retry may succeed.
	ErrProviderFailure = errors.New("provider failure")
)

// APIError is a refusal or failure that a provider reported inside a
// response body (as opposed to an HTTP status), for example DART status
// "010" or data.go.kr result code "30". It unwraps to one of the sentinel
// errors above when the code is known.
type APIError struct {
	// Endpoint is the endpoint that answered.
	Endpoint Endpoint

	// Code is the provider's result or status code, as sent.
	Code string

	// Message is the provider's message, as sent.
	Message string

	// Kind is ErrKeyRejected, ErrQuotaExceeded, ErrInvalidRequest,
	// ErrProviderFailure or nil when the code is unknown.
	Kind error
}

// Error describes the refusal with the provider's own code and message.
func (e *APIError) Error() string {
	msg := fmt.Sprintf("%s: provider code %s", e.Endpoint, providerValue(e.Code))
	if e.Message != "" {
		msg += " (" + e.Message + ")"
	}
	if e.Kind != nil {
		msg += ": " + e.Kind.Error()
	}
	return msg
}

// Unwrap returns Kind, so that errors.Is(err, ErrKeyRejected) and the like
// work on wrapped API errors.
func (e *APIError) Unwrap() error { return e.Kind }

// dataGoKrNoData reports whether a normalised data.go.kr result code means
// "no data" (NODATA_ERROR), which the parsers treat as an empty answer.
func dataGoKrNoData(code string) bool { return code == "3" }

// dataGoKrError returns the APIError for a data.go.kr result code, or nil
// when the code means success. Codes are compared without leading zeros:
// MOLIT answers "000", KRX "00", the gateway "30".
func dataGoKrError(ep Endpoint, code, msg string) error {
	norm := strings.TrimLeft(strings.TrimSpace(code), "0")
	if norm == "" && strings.TrimSpace(code) != "" {
		return nil
	}
	var kind error
	switch norm {
	case "10", "11", "12":
		kind = ErrInvalidRequest // INVALID_REQUEST_PARAMETER, NO_MANDATORY_REQUEST_PARAMETERS, NO_OPENAPI_SERVICE
	case "20", "21", "30", "31", "32", "33":
		kind = ErrKeyRejected // SERVICE_ACCESS_DENIED, TEMPORARILY_DISABLE_THE_SERVICEKEY, SERVICE_KEY_IS_NOT_REGISTERED, DEADLINE_HAS_EXPIRED, UNREGISTERED_IP, UNSIGNED_CALL
	case "22":
		kind = ErrQuotaExceeded // LIMITED_NUMBER_OF_SERVICE_REQUESTS_EXCEEDS
	case "1", "2", "4", "5", "99":
		kind = ErrProviderFailure // APPLICATION, DB, HTTP, SERVICETIMEOUT, UNKNOWN
	}
	return &APIError{Endpoint: ep, Code: code, Message: strings.TrimSpace(msg), Kind: kind}
}

// gatewayResponse is the error envelope the data.go.kr gateway answers with,
// with HTTP 200 and in XML whatever format was asked for, when it refuses a
// call before it reaches the service (for example an unregistered key).
type gatewayResponse struct {
	XMLName xml.Name `xml:"OpenAPI_ServiceResponse"`
	Header  struct {
		ErrMsg           string `xml:"errMsg"`
		ReturnAuthMsg    string `xml:"returnAuthMsg"`
		ReturnReasonCode string `xml:"returnReasonCode"`
	} `xml:"cmmMsgHeader"`
}

// isGatewayError reports whether body is a data.go.kr gateway error
// envelope.
func isGatewayError(body []byte) bool {
	return bytes.Contains(body[:min(len(body), 512)], []byte("<OpenAPI_ServiceResponse"))
}

// parseGatewayError turns a data.go.kr gateway error envelope into an error.
func parseGatewayError(ep Endpoint, body []byte) error {
	var g gatewayResponse
	if err := xml.Unmarshal(body, &g); err != nil {
		return fmt.Errorf("%s: decode gateway error: %w", ep, err)
	}
	msg := g.Header.ReturnAuthMsg
	if msg == "" {
		msg = g.Header.ErrMsg
	}
	if err := dataGoKrError(ep, g.Header.ReturnReasonCode, msg); err != nil {
		return err
	}
	return &APIError{Endpoint: ep, Code: g.Header.ReturnReasonCode, Message: msg, Kind: ErrProviderFailure}
}

// AptTrade is one apartment sale reported to MOLIT.
type AptTrade struct {
	// Region is the 5-digit LAWD code (시군구) the trade was queried for.
	Region string

	// DealYM is the month queried, as YYYYMM.
	DealYM string

	// Serial identifies the trade (aptSeq).
	Serial string

	// AptName is the apartment complex's name (aptNm).
	AptName string

	// Dong is the neighbourhood (umdNm, 법정동).
	Dong string

	// DealDate is the contract date, at midnight UTC.
	DealDate time.Time

	// AmountKRW is the price in won (dealAmount is sent in units of 10,000
	// won).
	AmountKRW int64

	// AreaM2 is the exclusive-use area in square metres (excluUseAr).
	AreaM2 float64

	// Floor is the floor of the unit.
	Floor int

	// BuildYear is the year the building was completed.
	BuildYear int
}

// AptTradeQuery returns the query (without the API key) asking for one page
// of the apartment trades reported in region (5-digit LAWD code) for the
// month dealYM (YYYYMM).
func AptTradeQuery(region, dealYM string, pageNo, numOfRows int) url.Values {
	return url.Values{
		"LAWD_CD":   {region},
		"DEAL_YMD":  {dealYM},
		"pageNo":    {strconv.Itoa(pageNo)},
		"numOfRows": {strconv.Itoa(numOfRows)},
	}
}

// aptTradeResponse is the XML answer of EndpointAptTrade.
type aptTradeResponse struct {
	XMLName xml.Name `xml:"response"`
	Header  struct {
		ResultCode string `xml:"resultCode"`
		ResultMsg  string `xml:"resultMsg"`
	} `xml:"header"`
	Body struct {
		Items struct {
			Item []aptTradeItem `xml:"item"`
		} `xml:"items"`
		NumOfRows  string `xml:"numOfRows"`
		PageNo     string `xml:"pageNo"`
		TotalCount string `xml:"totalCount"`
	} `xml:"body"`
}

// aptTradeItem is one <item> of an aptTradeResponse.
type aptTradeItem struct {
	AptNm      string `xml:"aptNm"`
	AptSeq     string `xml:"aptSeq"`
	BuildYear  string `xml:"buildYear"`
	DealAmount string `xml:"dealAmount"`
	DealYear   string `xml:"dealYear"`
	DealMonth  string `xml:"dealMonth"`
	DealDay    string `xml:"dealDay"`
	ExcluUseAr string `xml:"excluUseAr"`
	Floor      string `xml:"floor"`
	SggCd      string `xml:"sggCd"`
	UmdNm      string `xml:"umdNm"`
}

// ParseAptTrades decodes one page of EndpointAptTrade's answer for region
// and dealYM. It returns the trades on the page and the total number of
// trades over all pages as the provider declares it (totalCount; "no data"
// declares 0), never a number derived from the page, so that a short page
// can be told from the last one (see FetchPages). A refusal (for example result code "30" for an
// unregistered key or "10" for a bad parameter) is returned as an *APIError.
func ParseAptTrades(region, dealYM string, body []byte) (trades []AptTrade, totalCount int, err error) {
	ep := EndpointAptTrade
	if isGatewayError(body) {
		return nil, 0, parseGatewayError(ep, body)
	}
	var resp aptTradeResponse
	if err := xml.Unmarshal(body, &resp); err != nil {
		return nil, 0, fmt.Errorf("%s: decode response: %w", ep, err)
	}
	code := strings.TrimSpace(resp.Header.ResultCode)
	if code == "" {
		return nil, 0, fmt.Errorf("%s: response has no result code", ep)
	}
	if dataGoKrNoData(strings.TrimLeft(code, "0")) {
		return nil, 0, nil
	}
	if err := dataGoKrError(ep, code, resp.Header.ResultMsg); err != nil {
		return nil, 0, err
	}
	trades = make([]AptTrade, 0, len(resp.Body.Items.Item))
	for i, it := range resp.Body.Items.Item {
		t, err := it.trade(region, dealYM)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: item %d (aptSeq %s): %w", ep, i, providerValue(it.AptSeq), err)
		}
		trades = append(trades, t)
	}
	s := strings.TrimSpace(resp.Body.TotalCount)
	if s == "" {
		return nil, 0, fmt.Errorf("%s: response has no totalCount", ep)
	}
	if totalCount, err = strconv.Atoi(s); err != nil || totalCount < 0 {
		return nil, 0, fmt.Errorf("%s: bad totalCount %s", ep, providerValue(s))
	}
	return trades, totalCount, nil
}

// trade converts the item into an AptTrade.
func (it aptTradeItem) trade(region, dealYM string) (AptTrade, error) {
	t := AptTrade{
		Region:  region,
		DealYM:  dealYM,
		Serial:  strings.TrimSpace(it.AptSeq),
		AptName: strings.TrimSpace(it.AptNm),
		Dong:    strings.TrimSpace(it.UmdNm),
	}
	if t.Serial == "" {
		return AptTrade{}, errors.New("missing aptSeq")
	}
	amount, err := parseGroupedInt(it.DealAmount)
	if err != nil {
		return AptTrade{}, fmt.Errorf("bad dealAmount: %w", err)
	}
	t.AmountKRW = amount * 10_000
	y, err := atoiField("dealYear", it.DealYear)
	if err != nil {
		return AptTrade{}, err
	}
	m, err := atoiField("dealMonth", it.DealMonth)
	if err != nil {
		return AptTrade{}, err
	}
	d, err := atoiField("dealDay", it.DealDay)
	if err != nil {
		return AptTrade{}, err
	}
	t.DealDate = time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC)
	if t.DealDate.Year() != y || int(t.DealDate.Month()) != m || t.DealDate.Day() != d {
		return AptTrade{}, fmt.Errorf("bad deal date %d-%d-%d", y, m, d)
	}
	if t.AreaM2, err = strconv.ParseFloat(strings.TrimSpace(it.ExcluUseAr), 64); err != nil {
		return AptTrade{}, fmt.Errorf("bad excluUseAr: %w", err)
	}
	if t.Floor, err = atoiField("floor", it.Floor); err != nil {
		return AptTrade{}, err
	}
	if s := strings.TrimSpace(it.BuildYear); s != "" {
		if t.BuildYear, err = atoiField("buildYear", s); err != nil {
			return AptTrade{}, err
		}
	}
	return t, nil
}

// parseGroupedInt parses an integer written with thousands separators and
// padding, such as "    82,500".
func parseGroupedInt(s string) (int64, error) {
	clean := strings.ReplaceAll(strings.TrimSpace(s), ",", "")
	n, err := strconv.ParseInt(clean, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", providerValue(s), numberError(err))
	}
	return n, nil
}

// atoiField parses the integer field name, naming it in the error.
func atoiField(name, s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("bad %s: %w", name, err)
	}
	return n, nil
}
