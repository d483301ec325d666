package upstream_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

func TestParseStockPrice(t *testing.T) {
	t.Parallel()

	body := []byte(`{"response":{"header":{"resultCode":"00","resultMsg":"NORMAL SERVICE."},"body":{"numOfRows":1,"pageNo":1,"totalCount":1,
		"items":{"item":[{"basDt":"20250102","srtnCd":"005930","isinCd":"KR7005930003","itmsNm":"삼성전자","mrktCtg":"KOSPI",
		"clpr":"53400","vs":"-300","fltRt":"-.56","mkp":"53500","hipr":"54000","lopr":"53000","trqu":"16541244",
		"trPrc":"884512345678","lstgStCnt":"5969782550","mrktTotAmt":"318786388170000"}]}}}}`)
	prices, err := upstream.ParseStockPrice(body)
	require.NoError(t, err)
	require.Equal(t, []upstream.StockPrice{{
		Date:         time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC),
		ShortCode:    "005930",
		ISIN:         "KR7005930003",
		Name:         "삼성전자",
		Market:       "KOSPI",
		Close:        53400,
		Open:         53500,
		High:         54000,
		Low:          53000,
		Change:       -300,
		ChangeRate:   -0.56,
		Volume:       16541244,
		TradeValue:   884512345678,
		ListedShares: 5969782550,
		MarketCap:    318786388170000,
	}}, prices)

	// A single item sent as an object, numbers sent as numbers.
	one := []byte(`{"response":{"header":{"resultCode":"00","resultMsg":"NORMAL SERVICE."},"body":{"totalCount":"1",
		"items":{"item":{"basDt":"20250102","srtnCd":"005930","clpr":53400}}}}}`)
	prices, err = upstream.ParseStockPrice(one)
	require.NoError(t, err)
	require.Len(t, prices, 1)
	require.Equal(t, int64(53400), prices[0].Close)

	holiday := []byte(`{"response":{"header":{"resultCode":"00","resultMsg":"NORMAL SERVICE."},"body":{"numOfRows":1,"pageNo":1,"totalCount":0,"items":""}}}`)
	prices, err = upstream.ParseStockPrice(holiday)
	require.NoError(t, err, "a holiday is an empty answer")
	require.NotNil(t, prices)
	require.Empty(t, prices)
}

func TestParseStockPriceErrors(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		body string
		kind error
		msg  string
	}{
		{
			name: "unregistered key",
			body: `<OpenAPI_ServiceResponse><cmmMsgHeader><errMsg>SERVICE ERROR</errMsg><returnAuthMsg>SERVICE_KEY_IS_NOT_REGISTERED_ERROR</returnAuthMsg><returnReasonCode>30</returnReasonCode></cmmMsgHeader></OpenAPI_ServiceResponse>`,
			kind: upstream.ErrKeyRejected,
		},
		{
			name: "key error in json",
			body: `{"response":{"header":{"resultCode":"30","resultMsg":"SERVICE_KEY_IS_NOT_REGISTERED_ERROR"}}}`,
			kind: upstream.ErrKeyRejected,
			msg:  "SERVICE_KEY_IS_NOT_REGISTERED_ERROR",
		},
		{
			name: "invalid parameter",
			body: `{"response":{"header":{"resultCode":"10","resultMsg":"INVALID_REQUEST_PARAMETER_ERROR"}}}`,
			kind: upstream.ErrInvalidRequest,
		},
		{
			name: "application error",
			body: `{"response":{"header":{"resultCode":"01","resultMsg":"APPLICATION_ERROR"}}}`,
			kind: upstream.ErrProviderFailure,
		},
		{name: "no result code", body: `{"response":{}}`, msg: "no result code"},
		{name: "not json", body: `oops`, msg: "decode response"},
		{
			name: "bad price",
			body: `{"response":{"header":{"resultCode":"00"},"body":{"items":{"item":[{"basDt":"20250102","srtnCd":"005930","clpr":"n/a"}]}}}}`,
			msg:  "bad clpr",
		},
		{
			name: "bad date",
			body: `{"response":{"header":{"resultCode":"00"},"body":{"items":{"item":[{"basDt":"2025-01-02","srtnCd":"005930","clpr":"1"}]}}}}`,
			msg:  "bad basDt",
		},
		{
			name: "items not an object",
			body: `{"response":{"header":{"resultCode":"00"},"body":{"items":[1]}}}`,
			msg:  "decode items",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := upstream.ParseStockPrice([]byte(tc.body))
			require.Error(t, err)
			if tc.kind != nil {
				require.ErrorIs(t, err, tc.kind)
			}
			if tc.msg != "" {
				require.Contains(t, err.Error(), tc.msg)
			}
		})
	}
}

func TestStockPriceRoundTrip(t *testing.T) {
	t.Parallel()

	fake, srv := startFake(t, fakeupstream.Config{Companies: 500})
	companies := fake.Companies()
	dropper := companies[slices.IndexFunc(companies, func(c fakeupstream.Company) bool { return !c.DropStart.IsZero() })]

	// Thirty days around the drop window: a 20-day drawdown is visible.
	var closes []int64
	for day := dropper.DropStart.AddDate(0, 0, -10); day.Before(dropper.DropStart.AddDate(0, 0, 20)); day = day.AddDate(0, 0, 1) {
		status, body := call(t, fake, srv, upstream.EndpointStockPrice, upstream.StockPriceQuery(dropper.StockCode, day), "test-key")
		require.Equal(t, http.StatusOK, status)
		prices, err := upstream.ParseStockPrice(body)
		require.NoError(t, err)
		if wd := day.Weekday(); wd == time.Saturday || wd == time.Sunday {
			require.Empty(t, prices, day)
			continue
		}
		if len(prices) == 0 {
			continue // a fixed holiday
		}
		require.Len(t, prices, 1)
		p := prices[0]
		require.Equal(t, day, p.Date)
		require.Equal(t, dropper.StockCode, p.ShortCode)
		require.Equal(t, dropper.Name, p.Name)
		require.Equal(t, dropper.Market, p.Market)
		require.Equal(t, p.Close*p.ListedShares, p.MarketCap)
		require.True(t, p.Low <= p.Close && p.Close <= p.High, "%+v", p)
		require.True(t, p.Low <= p.Open && p.Open <= p.High, "%+v", p)
		closes = append(closes, p.Close)
	}
	require.Less(t, float64(slices.Min(closes))/float64(slices.Max(closes)), 0.7, "closes %v", closes)

	// Fixed holidays answer "items":"".
	status, body := call(t, fake, srv, upstream.EndpointStockPrice, upstream.StockPriceQuery(dropper.StockCode, time.Date(2025, 8, 15, 0, 0, 0, 0, time.UTC)), "test-key")
	require.Equal(t, http.StatusOK, status)
	prices, err := upstream.ParseStockPrice(body)
	require.NoError(t, err)
	require.Empty(t, prices)

	_, body = call(t, fake, srv, upstream.EndpointStockPrice, upstream.StockPriceQuery(dropper.StockCode, time.Date(2025, 8, 14, 0, 0, 0, 0, time.UTC)), "")
	_, err = upstream.ParseStockPrice(body)
	require.ErrorIs(t, err, upstream.ErrKeyRejected)
}
