package upstream_test

import (
	"archive/zip"
	"bytes"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/buildrisk/radar/upstream"
	"github.com/buildrisk/radar/upstream/fakeupstream"
)

// corpCodeZip builds a corp-code archive holding xmlText as CORPCODE.xml.
func corpCodeZip(t *testing.T, xmlText string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	f, err := zw.Create("CORPCODE.xml")
	require.NoError(t, err)
	_, err = f.Write([]byte(xmlText))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func TestParseCorpCodeZip(t *testing.T) {
	t.Parallel()

	archive := corpCodeZip(t, `<?xml version="1.0" encoding="UTF-8"?>
<result>
	<list>
		<corp_code>00126380</corp_code>
		<corp_name>삼성전자</corp_name>
		<corp_eng_name>SAMSUNG ELECTRONICS CO,.LTD</corp_eng_name>
		<stock_code>005930</stock_code>
		<modify_date>20250110</modify_date>
	</list>
	<list>
		<corp_code>00434003</corp_code>
		<corp_name>다코</corp_name>
		<corp_eng_name>Daco E&amp;C</corp_eng_name>
		<stock_code> </stock_code>
		<modify_date>20170630</modify_date>
	</list>
</result>`)
	codes, err := upstream.ParseCorpCodeZip(bytes.NewReader(archive), int64(len(archive)))
	require.NoError(t, err)
	require.Equal(t, []upstream.CorpCode{
		{CorpCode: "00126380", Name: "삼성전자", EngName: "SAMSUNG ELECTRONICS CO,.LTD", StockCode: "005930", ModifyDate: "20250110"},
		{CorpCode: "00434003", Name: "다코", EngName: "Daco E&C", StockCode: "", ModifyDate: "20170630"},
	}, codes)

	// The callback's error stops the stream and comes back wrapped.
	stop := errors.New("stop")
	calls := 0
	err = upstream.ReadCorpCodesZip(bytes.NewReader(archive), int64(len(archive)), func(upstream.CorpCode) error {
		calls++
		return stop
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, calls)

	// From a file.
	path := filepath.Join(t.TempDir(), "corpcode.zip")
	require.NoError(t, os.WriteFile(path, archive, 0o600))
	var names []string
	require.NoError(t, upstream.ReadCorpCodes(path, func(c upstream.CorpCode) error {
		names = append(names, c.Name)
		return nil
	}))
	require.Equal(t, []string{"삼성전자", "다코"}, names)
	require.Error(t, upstream.ReadCorpCodes(filepath.Join(t.TempDir(), "missing.zip"), func(upstream.CorpCode) error { return nil }))
}

func TestParseCorpCodeZipErrors(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		body []byte
		kind error
		msg  string
	}{
		{
			name: "unregistered key as xml",
			body: []byte(`<?xml version="1.0" encoding="UTF-8"?><result><status>010</status><message>등록되지 않은 인증키입니다.</message></result>`),
			kind: upstream.ErrKeyRejected,
			msg:  "010",
		},
		{
			name: "quota as json",
			body: []byte(`{"status":"020","message":"요청 제한을 초과하였습니다."}`),
			kind: upstream.ErrQuotaExceeded,
		},
		{name: "garbage", body: []byte("not a zip"), msg: "open archive"},
		{name: "wrong file", body: func() []byte {
			var buf bytes.Buffer
			zw := zip.NewWriter(&buf)
			_, _ = zw.Create("OTHER.xml")
			_ = zw.Close()
			return buf.Bytes()
		}(), msg: "no CORPCODE.xml"},
		{name: "broken xml", body: corpCodeZip(t, `<result><list><corp_code>1</corp_code>`), msg: "decode CORPCODE.xml"},
		{name: "entry without code", body: corpCodeZip(t, `<result><list><corp_name>x</corp_name></list></result>`), msg: "without corp_code"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := upstream.ParseCorpCodeZip(bytes.NewReader(tc.body), int64(len(tc.body)))
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

func TestCorpCodeRoundTrip(t *testing.T) {
	t.Parallel()

	fake, srv := startFake(t, fakeupstream.Config{Companies: 500})
	download := func() []upstream.CorpCode {
		status, body := call(t, fake, srv, upstream.EndpointCorpCode, upstream.CorpCodeQuery(), "test-key")
		require.Equal(t, http.StatusOK, status)
		codes, err := upstream.ParseCorpCodeZip(bytes.NewReader(body), int64(len(body)))
		require.NoError(t, err)
		return codes
	}
	first, second := download(), download()
	require.Len(t, first, 500)
	require.NotEqual(t, first, second, "the order differs between downloads")
	require.ElementsMatch(t, first, second, "the set does not")

	byCode := map[string]upstream.CorpCode{}
	for _, c := range first {
		byCode[c.CorpCode] = c
	}
	for _, c := range fake.Companies() {
		got, ok := byCode[c.CorpCode]
		require.True(t, ok, c.CorpCode)
		require.Equal(t, c.Name, got.Name)
		require.Equal(t, c.EngName, got.EngName)
		require.Equal(t, c.StockCode, got.StockCode)
		require.Equal(t, c.ModifyDate, got.ModifyDate)
	}

	status, body := call(t, fake, srv, upstream.EndpointCorpCode, upstream.CorpCodeQuery(), "")
	require.Equal(t, http.StatusOK, status)
	_, err := upstream.ParseCorpCodeZip(bytes.NewReader(body), int64(len(body)))
	require.ErrorIs(t, err, upstream.ErrKeyRejected)
}

func TestParseFilingList(t *testing.T) {
	t.Parallel()

	body := []byte(`{"status":"000","message":"정상","page_no":1,"page_count":100,"total_count":2,"total_page":1,"list":[
		{"corp_code":"00126380","corp_name":"삼성전자","stock_code":"005930","corp_cls":"Y","report_nm":"분기보고서 (2024.09)","rcept_no":"20241114000123","flr_nm":"삼성전자","rcept_dt":"20241114","rm":"유"},
		{"corp_code":"00434003","corp_name":"다코","stock_code":"","corp_cls":"E","report_nm":"감사보고서제출(감사의견 한정)","rcept_no":"20241113000045","flr_nm":"다코","rcept_dt":"20241113","rm":""}]}`)
	filings, pages, err := upstream.ParseFilingList(body)
	require.NoError(t, err)
	require.Equal(t, 1, pages)
	require.Equal(t, []upstream.Filing{
		{CorpCode: "00126380", CorpName: "삼성전자", StockCode: "005930", CorpClass: "Y", ReportName: "분기보고서 (2024.09)", ReceiptNo: "20241114000123", FilerName: "삼성전자", ReceiptDate: "20241114", Remark: "유"},
		{CorpCode: "00434003", CorpName: "다코", CorpClass: "E", ReportName: "감사보고서제출(감사의견 한정)", ReceiptNo: "20241113000045", FilerName: "다코", ReceiptDate: "20241113"},
	}, filings)
	at, err := filings[0].ReceivedAt()
	require.NoError(t, err)
	require.Equal(t, time.Date(2024, 11, 14, 0, 0, 0, 0, time.UTC), at)

	// Numbers sent as strings are accepted too.
	_, pages, err = upstream.ParseFilingList([]byte(`{"status":"000","message":"정상","total_page":"3","list":[]}`))
	require.NoError(t, err)
	require.Equal(t, 3, pages)

	filings, pages, err = upstream.ParseFilingList([]byte(`{"status":"013","message":"조회된 데이타가 없습니다."}`))
	require.NoError(t, err, "no data is an empty answer")
	require.Empty(t, filings)
	require.Zero(t, pages)
}

func TestParseFilingListErrors(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		body string
		kind error
		msg  string
	}{
		{name: "unregistered key", body: `{"status":"010","message":"등록되지 않은 인증키입니다."}`, kind: upstream.ErrKeyRejected, msg: "등록되지 않은 인증키입니다."},
		{name: "quota", body: `{"status":"020","message":"요청 제한을 초과하였습니다."}`, kind: upstream.ErrQuotaExceeded},
		{name: "bad field", body: `{"status":"100","message":"필드의 부적절한 값입니다."}`, kind: upstream.ErrInvalidRequest},
		{name: "maintenance", body: `{"status":"800","message":"시스템 점검으로 인한 서비스가 중지 중입니다."}`, kind: upstream.ErrProviderFailure},
		{name: "unknown status", body: `{"status":"555","message":"?"}`, msg: `provider code "555"`},
		{name: "no status", body: `{"list":[]}`, msg: "no status"},
		{name: "not json", body: `<html>`, msg: "decode response"},
		{name: "bad date", body: `{"status":"000","total_page":1,"list":[{"rcept_no":"1","rcept_dt":"2024-11-14"}]}`, msg: "bad receipt date"},
		{name: "no receipt number", body: `{"status":"000","total_page":1,"list":[{"rcept_dt":"20241114"}]}`, msg: "without rcept_no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := upstream.ParseFilingList([]byte(tc.body))
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

func TestFilingListRoundTrip(t *testing.T) {
	t.Parallel()

	fake, srv := startFake(t, fakeupstream.Config{Companies: 300})
	companies := fake.Companies()
	distressed := companies[slices.IndexFunc(companies, func(c fakeupstream.Company) bool { return c.Distressed })]
	from, to := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2025, 12, 31, 0, 0, 0, 0, time.UTC)

	var all []upstream.Filing
	totalPages := -1
	for page := 1; totalPages < 0 || page <= totalPages; page++ {
		status, body := call(t, fake, srv, upstream.EndpointFilingList, upstream.FilingListQuery(distressed.CorpCode, from, to, page, 5), "test-key")
		require.Equal(t, http.StatusOK, status)
		filings, pages, err := upstream.ParseFilingList(body)
		require.NoError(t, err)
		require.Positive(t, pages)
		totalPages = pages
		all = append(all, filings...)
	}
	require.NotEmpty(t, all)
	risky := 0
	seen := map[string]bool{}
	for _, f := range all {
		require.Equal(t, distressed.CorpCode, f.CorpCode)
		require.Equal(t, distressed.Name, f.CorpName)
		require.Equal(t, distressed.StockCode, f.StockCode)
		require.False(t, seen[f.ReceiptNo])
		seen[f.ReceiptNo] = true
		at, err := f.ReceivedAt()
		require.NoError(t, err)
		require.False(t, at.Before(from) || at.After(to))
		for _, word := range []string{"부도", "회생", "영업정지", "한정", "부적정", "의견거절", "소송"} {
			if strings.Contains(f.ReportName, word) {
				risky++
				break
			}
		}
	}
	require.Positive(t, risky, "a distressed company files risk reports")

	// A weekend has no filings: "013" is an empty answer.
	saturday := time.Date(2025, 1, 4, 0, 0, 0, 0, time.UTC)
	status, body := call(t, fake, srv, upstream.EndpointFilingList, upstream.FilingListQuery(distressed.CorpCode, saturday, saturday.AddDate(0, 0, 1), 1, 100), "test-key")
	require.Equal(t, http.StatusOK, status)
	filings, pages, err := upstream.ParseFilingList(body)
	require.NoError(t, err)
	require.Empty(t, filings)
	require.Zero(t, pages)

	_, body = call(t, fake, srv, upstream.EndpointFilingList, upstream.FilingListQuery(distressed.CorpCode, from, to, 1, 100), "")
	_, _, err = upstream.ParseFilingList(body)
	require.ErrorIs(t, err, upstream.ErrKeyRejected)
}

// ParseFilingPage returns DART's declared total_count, which a paged reader
// holds each page to; a page without it cannot be checked and is an error.
func TestParseFilingPage(t *testing.T) {
	t.Parallel()

	p, err := upstream.ParseFilingPage([]byte(`{"status":"000","message":"정상","page_no":2,"page_count":100,"total_count":"101","total_page":2,"list":[
		{"corp_code":"00126380","corp_name":"삼성전자","report_nm":"분기보고서 (2024.09)","rcept_no":"20241114000123","flr_nm":"삼성전자","rcept_dt":"20241114"}]}`))
	require.NoError(t, err)
	require.Equal(t, 101, p.TotalCount)
	require.Equal(t, 2, p.TotalPages)
	require.Len(t, p.Filings, 1)
	require.Equal(t, 1, upstream.PageLen(p.TotalCount, 2, 100), "the last page of 101 holds one")

	p, err = upstream.ParseFilingPage([]byte(`{"status":"013","message":"조회된 데이타가 없습니다."}`))
	require.NoError(t, err, "no data declares nothing")
	require.Zero(t, p.TotalCount)

	_, err = upstream.ParseFilingPage([]byte(`{"status":"000","message":"정상","total_page":1,"list":[]}`))
	require.ErrorContains(t, err, "response has no total_count")
}

// A bad entry of the corp code archive is reported without its corp_name
// (which a hostile provider may fill with the key) and with its corp_code
// quoted only when short enough to quote whole: a value cut to 40 bytes
// before the key scrubber sees it would keep most of a key.
func TestParseCorpCodeZip_BadEntryQuotesNoProviderText(t *testing.T) {
	t.Parallel()
	const key = "3f9a1c27be04d5f68a9b0c1d2e3f4a5b6c7d8e9f"
	for name, tc := range map[string]struct{ entry, want string }{
		"ShortCode": {
			entry: `<corp_code>12x</corp_code><corp_name>Z` + key + `</corp_name>`,
			want:  `corp_code "12x" is not 8 digits`,
		},
		"LongCode": {
			entry: `<corp_code>Z` + key + `</corp_code><corp_name>Z` + key + `</corp_name>`,
			want:  `corp_code of 41 bytes is not 8 digits`,
		},
		"NoCode": {
			entry: `<corp_name>Z` + key + `</corp_name>`,
			want:  `entry without corp_code`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body := corpCodeZip(t, `<result><list>`+tc.entry+`</list></result>`)
			_, err := upstream.ParseCorpCodeZip(bytes.NewReader(body), int64(len(body)))
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), key[:8])
			require.NotContains(t, err.Error(), "corp_name")
		})
	}
}
