package upstream

// Provider names one external data provider. Its value is the suffix of the
// BUILDRISK_KEY_<P>, BUILDRISK_<P>_URL and BUILDRISK_DAILY_CAP_<P> variables
// and the provider attribute of the external-call metrics.
type Provider string

// The providers buildrisk-radar calls.
const (
	ProviderCREDIT Provider = "CREDIT"
	ProviderDART   Provider = "DART"
	ProviderKRX    Provider = "KRX"
	ProviderMOLIT  Provider = "MOLIT"
)

// Providers lists every provider in a stable order.
var Providers = []Provider{ProviderCREDIT, ProviderDART, ProviderKRX, ProviderMOLIT}

// KeyParam is the query parameter that carries the provider's API key, as the
// real provider names it.
func (p Provider) KeyParam() string {
	switch p {
	case ProviderDART:
		return "crtfc_key"
	case ProviderCREDIT:
		return "apiKey"
	default: // MOLIT and KRX are both data.go.kr services.
		return "serviceKey"
	}
}

// KeyEnv is the name of the environment variable holding the provider's key.
func (p Provider) KeyEnv() string { return "BUILDRISK_KEY_" + string(p) }
