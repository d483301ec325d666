package observability

import "net/http"

// RedactHeader returns a copy of h with the value of every [SecretHeaders]
// header replaced by [Redacted], for logging a request or response.
func RedactHeader(h http.Header) http.Header {
	out := h.Clone()
	for _, name := range SecretHeaders {
		if _, ok := out[http.CanonicalHeaderKey(name)]; ok {
			out.Set(name, Redacted)
		}
	}
	return out
}
