package upstream

import "io"

// The tests decode whole answers with these; the jobs stream them
// (ReadCorpCodesZip, ParseFilingPage).

// ParseCorpCodeZip decodes every company of the corp code archive held by r
// (size bytes), in archive order. Prefer ReadCorpCodesZip or ReadCorpCodes
// for the real archive, which is large.
func ParseCorpCodeZip(r io.ReaderAt, size int64) ([]CorpCode, error) {
	var codes []CorpCode
	err := ReadCorpCodesZip(r, size, func(c CorpCode) error {
		codes = append(codes, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return codes, nil
}

// ParseFilingList decodes one page of EndpointFilingList's answer into the
// filings on it and the number of pages. Status "013" (nothing found) is an
// empty answer, not an error; any other status but "000" is returned as an
// *APIError.
func ParseFilingList(body []byte) (filings []Filing, totalPages int, err error) {
	filings, totalPages, _, err = parseFilingPage(body)
	return filings, totalPages, err
}

// WithParam is withParam, for its table test.
var WithParam = withParam

// ParseRetryAfter is parseRetryAfter, for its table test.
var ParseRetryAfter = parseRetryAfter
