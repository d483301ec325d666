package config

import (
	"cmp"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
)

// maxPublicProxyBits is the widest public space BUILDRISK_TRUSTED_PROXIES
// may trust without BUILDRISK_TRUSTED_PROXIES_ALLOW_WIDE=1: a /8 of the
// address family. Wider, any client of a cloud's whole range could name
// its own address.
const maxPublicProxyBits = 8

// privateRanges are the ranges no client of the internet reaches the api
// from directly: trusting them whole is a deployment's own business.
var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"), netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("fc00::/7"), netip.MustParsePrefix("fe80::/10"),
}

// parseTrustedProxies parses BUILDRISK_TRUSTED_PROXIES: IP addresses and
// CIDR prefixes separated by commas or spaces. Prefixes that together
// cover an address family's whole space are refused (any client could
// then name its own address), and so is more than a /8 of public space
// unless allowWide (BUILDRISK_TRUSTED_PROXIES_ALLOW_WIDE=1).
func parseTrustedProxies(v string, allowWide bool) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, entry := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		prefix, err := netip.ParsePrefix(entry)
		if err != nil {
			addr, addrErr := netip.ParseAddr(entry)
			if addrErr != nil || addr.Zone() != "" {
				return nil, fmt.Errorf("%q is not an IP address or a CIDR prefix such as 10.0.0.0/8", entry)
			}
			addr = addr.Unmap()
			prefix = netip.PrefixFrom(addr, addr.BitLen())
		}
		if prefix.Bits() == 0 {
			return nil, fmt.Errorf("%q trusts every address, so any client could name its own; list the proxies", entry)
		}
		out = append(out, prefix.Masked())
	}
	if err := checkProxyCoverage(out, allowWide); err != nil {
		return nil, err
	}
	return out, nil
}

// checkProxyCoverage refuses prefixes that together cover a family's whole
// space, or, unless allowWide, more than a /8 of its public space.
func checkProxyCoverage(prefixes []netip.Prefix, allowWide bool) error {
	for _, family := range []struct {
		name string
		bits int
	}{{"IPv4", 32}, {"IPv6", 128}} {
		var own []netip.Prefix
		for _, p := range prefixes {
			if p.Addr().BitLen() == family.bits {
				own = append(own, p)
			}
		}
		merged := mergePrefixes(own)
		if len(merged) == 1 && merged[0].Bits() == 0 {
			return fmt.Errorf("the prefixes together trust the whole %s space, so any client could name its own address; list the proxies", family.name)
		}
		limit := new(big.Int).Lsh(big.NewInt(1), uint(family.bits-maxPublicProxyBits))
		if !allowWide && publicSize(merged).Cmp(limit) > 0 {
			return fmt.Errorf("the prefixes together trust more than a /%d of public %s space; list the proxies, or set BUILDRISK_TRUSTED_PROXIES_ALLOW_WIDE=1 if every such address is a proxy of yours",
				maxPublicProxyBits, family.name)
		}
	}
	return nil
}

// mergePrefixes returns the union of prefixes (all of one family, masked)
// as the fewest prefixes: those inside another dropped, sibling pairs
// joined into their parent until none is left.
func mergePrefixes(prefixes []netip.Prefix) []netip.Prefix {
	set := slices.Clone(prefixes)
	for {
		slices.SortFunc(set, func(a, b netip.Prefix) int {
			return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
		})
		var out []netip.Prefix
		for _, p := range set {
			if len(out) > 0 && out[len(out)-1].Contains(p.Addr()) && out[len(out)-1].Bits() <= p.Bits() {
				continue // inside the previous one
			}
			out = append(out, p)
		}
		joined := false
		for i := 0; i+1 < len(out); i++ {
			a, b := out[i], out[i+1]
			if a.Bits() == b.Bits() && a.Bits() > 0 {
				parent, _ := a.Addr().Prefix(a.Bits() - 1)
				if parent.Contains(b.Addr()) {
					out[i], out = parent, slices.Delete(out, i+1, i+2)
					joined = true
				}
			}
		}
		set = out
		if !joined {
			return set
		}
	}
}

// publicSize returns how many addresses of merged (disjoint prefixes of
// one family) lie outside privateRanges.
func publicSize(merged []netip.Prefix) *big.Int {
	total := new(big.Int)
	for _, p := range merged {
		bits := p.Addr().BitLen()
		size := new(big.Int).Lsh(big.NewInt(1), uint(bits-p.Bits()))
		for _, private := range privateRanges {
			if private.Addr().BitLen() != bits || !p.Overlaps(private) {
				continue
			}
			// Two prefixes that overlap: one holds the other.
			inner := max(p.Bits(), private.Bits())
			size.Sub(size, new(big.Int).Lsh(big.NewInt(1), uint(bits-inner)))
		}
		total.Add(total, size)
	}
	return total
}
