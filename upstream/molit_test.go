package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// startFake runs a fake upstream with cfg behind an httptest server.
func startFake(t *testing.T, cfg fakeupstream.Config) (*fakeupstream.Server, *httptest.Server) {
	t.Helper()
	fake := fakeupstream.New(cfg)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return fake, srv
}

// call calls ep on srv with q, adding an API key unless key is "", checks
// that the fake counted the call under ep.CallKey(q) and returns the answer.
func call(t *testing.T, fake *fakeupstream.Server, srv *httptest.Server, ep upstream.Endpoint, q url.Values, key string) (int, []byte) {
	t.Helper()
	before := fake.Stats().Calls[ep.Name][ep.CallKey(q)]
	full := url.Values{}
	for k, v := range q {
		full[k] = v
	}
	if key != "" {
		full.Set(ep.Provider.KeyParam(), key)
	}
	resp, err := srv.Client().Get(srv.URL + ep.Path + "?" + full.Encode())
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, before+1, fake.Stats().Calls[ep.Name][ep.CallKey(q)], "the fake counts %s calls under CallKey", ep)
	return resp.StatusCode, body
}

func TestEndpointCallKey(t *testing.T) {
	t.Parallel()

	require.Equal(t, "11110:202501", upstream.EndpointAptTrade.CallKey(upstream.AptTradeQuery("11110", "202501", 1, 1000)))
	require.Equal(t, "all", upstream.EndpointCorpCode.CallKey(upstream.CorpCodeQuery()))
	require.Equal(t, "00126380:20250101:20250131:2", upstream.EndpointFilingList.CallKey(upstream.FilingListQuery(
		"00126380", time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2025, 1, 31, 0, 0, 0, 0, time.UTC), 2, 100)))
	require.Equal(t, "005930:20250102", upstream.EndpointStockPrice.CallKey(upstream.StockPriceQuery("005930", time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC))))
	require.Equal(t, "00126380", upstream.EndpointCreditLookup.CallKey(upstream.CreditLookupQuery("00126380")))
	require.Equal(t, "00126380", upstream.EndpointCreditFallback.CallKey(upstream.CreditFallbackQuery("00126380")))
	require.Len(t, upstream.Endpoints, 6)
	require.Equal(t, "MOLIT/aptTrade", upstream.EndpointAptTrade.String())
}

func TestParseAptTrades(t *testing.T) {
	t.Parallel()

	body := []byte(`<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<response><header><resultCode>000</resultCode><resultMsg>OK</resultMsg></header><body><items>
<item><aptNm>한빛아파트</aptNm><aptSeq>11110-202501-001</aptSeq><buildYear>2005</buildYear><dealAmount>    82,500</dealAmount>
<dealDay>15</dealDay><dealMonth>1</dealMonth><dealYear>2025</dealYear><excluUseAr>84.97</excluUseAr><floor>12</floor>
<sggCd>11110</sggCd><umdNm>사직동</umdNm></item>
</items><numOfRows>10</numOfRows><pageNo>1</pageNo><totalCount>11</totalCount></body></response>`)
	trades, total, err := upstream.ParseAptTrades("11110", "202501", body)
	require.NoError(t, err)
	require.Equal(t, 11, total)
	require.Equal(t, []upstream.AptTrade{{
		Region:    "11110",
		DealYM:    "202501",
		Serial:    "11110-202501-001",
		AptName:   "한빛아파트",
		Dong:      "사직동",
		DealDate:  time.Date(2025, 1, 15, 0, 0, 0, 0, time.UTC),
		AmountKRW: 825_000_000,
		AreaM2:    84.97,
		Floor:     12,
		BuildYear: 2005,
	}}, trades)

	empty := []byte(`<response><header><resultCode>000</resultCode><resultMsg>OK</resultMsg></header><body><items></items><numOfRows>10</numOfRows><pageNo>1</pageNo><totalCount>0</totalCount></body></response>`)
	trades, total, err = upstream.ParseAptTrades("11110", "202501", empty)
	require.NoError(t, err)
	require.Empty(t, trades)
	require.Zero(t, total)

	noData := []byte(`<response><header><resultCode>03</resultCode><resultMsg>NO_DATA</resultMsg></header></response>`)
	trades, _, err = upstream.ParseAptTrades("11110", "202501", noData)
	require.NoError(t, err)
	require.Empty(t, trades)
}

func TestParseAptTradesErrors(t *testing.T) {
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
			msg:  "SERVICE_KEY_IS_NOT_REGISTERED_ERROR",
		},
		{
			name: "quota",
			body: `<OpenAPI_ServiceResponse><cmmMsgHeader><errMsg>SERVICE ERROR</errMsg><returnAuthMsg>LIMITED_NUMBER_OF_SERVICE_REQUESTS_EXCEEDS_ERROR</returnAuthMsg><returnReasonCode>22</returnReasonCode></cmmMsgHeader></OpenAPI_ServiceResponse>`,
			kind: upstream.ErrQuotaExceeded,
		},
		{
			name: "invalid parameter",
			body: `<response><header><resultCode>10</resultCode><resultMsg>INVALID_REQUEST_PARAMETER_ERROR</resultMsg></header></response>`,
			kind: upstream.ErrInvalidRequest,
			msg:  "INVALID_REQUEST_PARAMETER_ERROR",
		},
		{name: "not xml", body: `{"oops":1}`, msg: "decode response"},
		{name: "no result code", body: `<response><header></header></response>`, msg: "no result code"},
		{
			name: "bad amount",
			body: `<response><header><resultCode>000</resultCode></header><body><items><item><aptSeq>x</aptSeq><dealAmount>8억</dealAmount></item></items></body></response>`,
			msg:  "dealAmount",
		},
		{
			name: "bad date",
			body: `<response><header><resultCode>000</resultCode></header><body><items><item><aptSeq>x</aptSeq><dealAmount>1,000</dealAmount><dealYear>2025</dealYear><dealMonth>2</dealMonth><dealDay>30</dealDay><excluUseAr>59.9</excluUseAr><floor>1</floor></item></items></body></response>`,
			msg:  "bad deal date",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := upstream.ParseAptTrades("11110", "202501", []byte(tc.body))
			require.Error(t, err)
			if tc.kind != nil {
				require.ErrorIs(t, err, tc.kind)
				var apiErr *upstream.APIError
				require.True(t, errors.As(err, &apiErr))
				require.Equal(t, upstream.EndpointAptTrade, apiErr.Endpoint)
			}
			if tc.msg != "" {
				require.Contains(t, err.Error(), tc.msg)
			}
		})
	}
}

func TestAptTradeRoundTrip(t *testing.T) {
	t.Parallel()

	fake, srv := startFake(t, fakeupstream.Config{Companies: 50})
	ep := upstream.EndpointAptTrade

	// Read a year of one region page by page and check the pages add up.
	seen := map[string]bool{}
	for month := 1; month <= 12; month++ {
		dealYM := time.Date(2025, time.Month(month), 1, 0, 0, 0, 0, time.UTC).Format("200601")
		var all []upstream.AptTrade
		total := -1
		for page := 1; total < 0 || len(all) < total; page++ {
			status, body := call(t, fake, srv, ep, upstream.AptTradeQuery("11680", dealYM, page, 7), "test-key")
			require.Equal(t, http.StatusOK, status)
			trades, n, err := upstream.ParseAptTrades("11680", dealYM, body)
			require.NoError(t, err)
			if total < 0 {
				total = n
			}
			require.Equal(t, total, n)
			require.LessOrEqual(t, len(trades), 7)
			if len(trades) == 0 {
				break
			}
			all = append(all, trades...)
		}
		require.Len(t, all, total)
		for _, tr := range all {
			require.False(t, seen[tr.Serial], "serial %s repeats", tr.Serial)
			seen[tr.Serial] = true
			require.Equal(t, "11680", tr.Region)
			require.Equal(t, dealYM, tr.DealYM)
			require.Equal(t, dealYM, tr.DealDate.Format("200601"))
			require.Positive(t, tr.AmountKRW)
			require.Zero(t, tr.AmountKRW%1_000_000, "amounts are whole 100s of 10,000 won")
			require.Positive(t, tr.AreaM2)
			require.NotEmpty(t, tr.AptName)
			require.NotEmpty(t, tr.Dong)
		}
	}
	require.NotEmpty(t, seen)

	status, body := call(t, fake, srv, ep, upstream.AptTradeQuery("11680", "202501", 1, 10), "")
	require.Equal(t, http.StatusOK, status)
	_, _, err := upstream.ParseAptTrades("11680", "202501", body)
	require.ErrorIs(t, err, upstream.ErrKeyRejected)

	status, body = call(t, fake, srv, ep, upstream.AptTradeQuery("1168", "202501", 1, 10), "test-key")
	require.Equal(t, http.StatusOK, status)
	_, _, err = upstream.ParseAptTrades("1168", "202501", body)
	require.ErrorIs(t, err, upstream.ErrInvalidRequest)
}

// shortRate 1 makes every page short of what its declared total implies;
// FetchPages asks again and then names the page. With whole pages, it
// returns exactly the declared total.
func TestFetchPagesShortPage(t *testing.T) {
	t.Parallel()

	fake, srv := startFake(t, fakeupstream.Config{Companies: 50})
	ep := upstream.EndpointAptTrade
	fetch := func(ctx context.Context, page int) ([]upstream.AptTrade, int, error) {
		_, body := call(t, fake, srv, ep, upstream.AptTradeQuery("11680", "202501", page, 7), "k")
		return upstream.ParseAptTrades("11680", "202501", body)
	}
	trades, total, err := upstream.FetchPages(context.Background(), ep, "11680:202501", 7, 3, fetch)
	require.NoError(t, err)
	require.Greater(t, total, 7, "several pages")
	require.Len(t, trades, total)

	fake.SetConfig(fakeupstream.Config{Companies: 50, ShortRate: 1})
	fake.Reset()
	_, _, err = upstream.FetchPages(context.Background(), ep, "11680:202501", 7, 3, fetch)
	var pageErr *upstream.PageError
	require.ErrorAs(t, err, &pageErr)
	require.Equal(t, upstream.PageError{Endpoint: ep, Key: "11680:202501", Page: 1, Got: 3, Want: 7, Total: total, Attempts: 3}, *pageErr)
	require.Equal(t, fmt.Sprintf("MOLIT/aptTrade 11680:202501 page 1: 3 items where the declared total of %d implies 7, after 3 attempts", total), err.Error())
	require.Equal(t, int64(3), fake.Stats().Total)

	// Half the pages short: each is asked again until whole (the draws are
	// fixed by the seed and the call count), and the result is exact.
	fake.SetConfig(fakeupstream.Config{Companies: 50, ShortRate: 0.5})
	fake.Reset()
	again, n, err := upstream.FetchPages(context.Background(), ep, "11680:202501", 7, 10, fetch)
	require.NoError(t, err)
	require.Equal(t, total, n)
	require.Equal(t, trades, again)
	require.Greater(t, fake.Stats().Total, int64((total+6)/7), "some pages were asked again")

	// Pages that add up to another count than the last declared total: the
	// listing changed while it was read.
	calls := 0
	_, _, err = upstream.FetchPages(context.Background(), ep, "k", 2, 1, func(context.Context, int) ([]int, int, error) {
		calls++
		if calls == 1 {
			return []int{1, 2}, 4, nil
		}
		return []int{}, 1, nil // two filings withdrawn meanwhile
	})
	require.ErrorAs(t, err, &pageErr)
	require.Equal(t, "MOLIT/aptTrade k: the pages held 2 items but the last one declared 1 (the listing changed while it was read)", err.Error())
}

// ParseAptTrades returns MOLIT's declared totalCount as it is, never the
// page's length: a short page must stay tellable from the last one.
func TestParseAptTradesDeclaredTotal(t *testing.T) {
	t.Parallel()

	body := []byte(`<response><header><resultCode>000</resultCode><resultMsg>OK</resultMsg></header><body><items></items><numOfRows>10</numOfRows><pageNo>1</pageNo><totalCount>25</totalCount></body></response>`)
	trades, total, err := upstream.ParseAptTrades("11110", "202501", body)
	require.NoError(t, err)
	require.Empty(t, trades)
	require.Equal(t, 25, total, "an empty page declaring 25")

	_, _, err = upstream.ParseAptTrades("11110", "202501", []byte(`<response><header><resultCode>000</resultCode></header><body><items></items></body></response>`))
	require.ErrorContains(t, err, "response has no totalCount")
}
