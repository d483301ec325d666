package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// krxDateLayout is the layout of basDt.
const krxDateLayout = "20060102"

// StockPrice is one stock's prices on one trading day.
type StockPrice struct {
	// Date is the trading day (basDt), at midnight UTC.
	Date time.Time

	// ShortCode is the 6-digit listing code (srtnCd).
	ShortCode string

	// ISIN is the stock's ISIN (isinCd).
	ISIN string

	// Name is the stock's name (itmsNm).
	Name string

	// Market is "KOSPI", "KOSDAQ" or "KONEX" (mrktCtg).
	Market string

	// Close, Open, High and Low are the day's prices in won.
	Close, Open, High, Low int64

	// Change is Close minus the previous trading day's close (vs).
	Change int64

	// ChangeRate is Change as a percentage of the previous close (fltRt).
	ChangeRate float64

	// Volume is the number of shares traded (trqu).
	Volume int64

	// TradeValue is the value traded in won (trPrc).
	TradeValue int64

	// ListedShares is the number of listed shares (lstgStCnt).
	ListedShares int64

	// MarketCap is the market capitalisation in won (mrktTotAmt).
	MarketCap int64
}

// StockPriceQuery returns the query (without the API key) asking for the
// prices of the stock listed as shortCode (6 digits) on date (a calendar
// date in Korea), as JSON.
func StockPriceQuery(shortCode string, date time.Time) url.Values {
	return url.Values{
		"basDt":      {date.Format(krxDateLayout)},
		"likeSrtnCd": {shortCode},
		"resultType": {"json"},
		"numOfRows":  {"1"},
		"pageNo":     {"1"},
	}
}

// stockPriceResponse is the JSON answer of EndpointStockPrice.
type stockPriceResponse struct {
	Response struct {
		Header struct {
			ResultCode string `json:"resultCode"`
			ResultMsg  string `json:"resultMsg"`
		} `json:"header"`
		Body struct {
			NumOfRows  flexString `json:"numOfRows"`
			PageNo     flexString `json:"pageNo"`
			TotalCount flexString `json:"totalCount"`
			// Items is {"item":[...]} or, when there is nothing (holidays,
			// unknown codes), the empty string "".
			Items json.RawMessage `json:"items"`
		} `json:"body"`
	} `json:"response"`
}

// stockPriceItem is one item of a stockPriceResponse. Every value is sent
// as a string.
type stockPriceItem struct {
	BasDt      flexString `json:"basDt"`
	SrtnCd     flexString `json:"srtnCd"`
	IsinCd     flexString `json:"isinCd"`
	ItmsNm     flexString `json:"itmsNm"`
	MrktCtg    flexString `json:"mrktCtg"`
	Clpr       flexString `json:"clpr"`
	Vs         flexString `json:"vs"`
	FltRt      flexString `json:"fltRt"`
	Mkp        flexString `json:"mkp"`
	Hipr       flexString `json:"hipr"`
	Lopr       flexString `json:"lopr"`
	Trqu       flexString `json:"trqu"`
	TrPrc      flexString `json:"trPrc"`
	LstgStCnt  flexString `json:"lstgStCnt"`
	MrktTotAmt flexString `json:"mrktTotAmt"`
}

// ParseStockPrice decodes EndpointStockPrice's answer. A day without trading
// (weekend, holiday) or an unknown code is an empty slice and a nil error.
// A refusal (header result code other than "00", or the data.go.kr
// gateway's XML error envelope) is returned as an *APIError.
func ParseStockPrice(body []byte) (prices []StockPrice, err error) {
	ep := EndpointStockPrice
	if isGatewayError(body) {
		return nil, parseGatewayError(ep, body)
	}
	var resp stockPriceResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("%s: decode response: %w", ep, err)
	}
	code := strings.TrimSpace(resp.Response.Header.ResultCode)
	if code == "" {
		return nil, fmt.Errorf("%s: response has no result code", ep)
	}
	if dataGoKrNoData(strings.TrimLeft(code, "0")) {
		return []StockPrice{}, nil
	}
	if err := dataGoKrError(ep, code, resp.Response.Header.ResultMsg); err != nil {
		return nil, err
	}
	items, err := stockPriceItems(resp.Response.Body.Items)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ep, err)
	}
	prices = make([]StockPrice, 0, len(items))
	for i, it := range items {
		p, err := it.price()
		if err != nil {
			return nil, fmt.Errorf("%s: item %d (srtnCd %s): %w", ep, i, providerValue(string(it.SrtnCd)), err)
		}
		prices = append(prices, p)
	}
	return prices, nil
}

// stockPriceItems decodes the items value: "" or null (nothing), or an
// object whose item is an array or, for a single item, an object.
func stockPriceItems(raw json.RawMessage) ([]stockPriceItem, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) || bytes.Equal(raw, []byte(`""`)) {
		return nil, nil
	}
	var wrapper struct {
		Item json.RawMessage `json:"item"`
	}
	if err := json.Unmarshal(raw, &wrapper); err != nil {
		return nil, fmt.Errorf("decode items: %w", err)
	}
	item := bytes.TrimSpace(wrapper.Item)
	switch {
	case len(item) == 0 || bytes.Equal(item, []byte("null")):
		return nil, nil
	case item[0] == '{':
		var one stockPriceItem
		if err := json.Unmarshal(item, &one); err != nil {
			return nil, fmt.Errorf("decode item: %w", err)
		}
		return []stockPriceItem{one}, nil
	default:
		var many []stockPriceItem
		if err := json.Unmarshal(item, &many); err != nil {
			return nil, fmt.Errorf("decode items: %w", err)
		}
		return many, nil
	}
}

// price converts the item into a StockPrice.
func (it stockPriceItem) price() (StockPrice, error) {
	date, err := time.Parse(krxDateLayout, string(it.BasDt))
	if err != nil {
		return StockPrice{}, fmt.Errorf("bad basDt: %w", err)
	}
	p := StockPrice{
		Date:      date,
		ShortCode: string(it.SrtnCd),
		ISIN:      string(it.IsinCd),
		Name:      string(it.ItmsNm),
		Market:    string(it.MrktCtg),
	}
	if p.ShortCode == "" {
		return StockPrice{}, fmt.Errorf("missing srtnCd")
	}
	ints := []struct {
		name string
		val  flexString
		dst  *int64
	}{
		{"clpr", it.Clpr, &p.Close},
		{"mkp", it.Mkp, &p.Open},
		{"hipr", it.Hipr, &p.High},
		{"lopr", it.Lopr, &p.Low},
		{"vs", it.Vs, &p.Change},
		{"trqu", it.Trqu, &p.Volume},
		{"trPrc", it.TrPrc, &p.TradeValue},
		{"lstgStCnt", it.LstgStCnt, &p.ListedShares},
		{"mrktTotAmt", it.MrktTotAmt, &p.MarketCap},
	}
	for _, f := range ints {
		if f.val == "" {
			continue
		}
		n, err := parseGroupedInt(string(f.val))
		if err != nil {
			return StockPrice{}, fmt.Errorf("bad %s: %w", f.name, err)
		}
		*f.dst = n
	}
	if p.Close <= 0 {
		return StockPrice{}, fmt.Errorf("bad clpr %s: not positive", providerValue(string(it.Clpr)))
	}
	if it.FltRt != "" {
		if p.ChangeRate, err = strconv.ParseFloat(string(it.FltRt), 64); err != nil {
			return StockPrice{}, fmt.Errorf("bad fltRt: %w", err)
		}
	}
	return p, nil
}
