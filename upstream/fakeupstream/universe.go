package fakeupstream

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// DropDays is the length in calendar days of a stock's sharp drop window
// (Company.DropStart): the price falls by about 40% over it.
const DropDays = 14

// Company is one company of the fake's universe, the set the DART corp-code
// archive lists. Its fields let tests and seeding predict what the providers
// will say about it.
type Company struct {
	// CorpCode is the 8-digit DART code.
	CorpCode string

	// Name is the Korean name; EngName the English one.
	Name, EngName string

	// StockCode is the 6-digit listing code, "" when unlisted.
	StockCode string

	// Market is "KOSPI" or "KOSDAQ", "" when unlisted.
	Market string

	// Construction marks construction companies, the ones the radar
	// watches.
	Construction bool

	// MainRegions are the 5-digit LAWD codes (시군구) the company mostly
	// builds in or is based in.
	MainRegions []string

	// ModifyDate is the corp-code archive's modify_date, as YYYYMMDD.
	ModifyDate string

	// Distressed marks the construction companies (about 5%) that file
	// risk-relevant reports (부도발생, 회생절차개시신청, 영업정지, qualified
	// audit opinions, 소송등의제기) and have weak credit grades.
	Distressed bool

	// DropStart is the first day of a DropDays window in which the stock
	// falls by about 40%, zero when it has none. A few listed construction
	// companies have one, between 2025 and 2026.
	DropStart time.Time
}

// universe is the company set derived from one seed and size, with the
// indexes the endpoints need. It is immutable.
type universe struct {
	companies []Company // by corp code
	byCode    map[string]int
	listed    []int // indexes of listed companies, by stock code

	// corpXML holds each company's <list> element of CORPCODE.xml, by
	// index, rendered once.
	corpXML [][]byte
}

// lawdCodes are the regions companies are given as MainRegions: Seoul's 25
// districts and some busy districts elsewhere.
var lawdCodes = []string{
	"11110", "11140", "11170", "11200", "11215", "11230", "11260", "11290", "11305", "11320",
	"11350", "11380", "11410", "11440", "11470", "11500", "11530", "11545", "11560", "11590",
	"11620", "11650", "11680", "11710", "11740",
	"26350", "26440", "27260", "28185", "29200", "30200", "36110",
	"41135", "41281", "41465", "41570", "41590",
}

// namePart is one part of a company name, in Korean and English.
type namePart struct{ ko, en string }

var (
	namePrefixes = []namePart{
		{"가람", "Garam"}, {"나래", "Narae"}, {"다온", "Daon"}, {"대한", "Daehan"}, {"동방", "Dongbang"},
		{"동서", "Dongseo"}, {"미래", "Mirae"}, {"백두", "Baekdu"}, {"새한", "Saehan"}, {"서해", "Seohae"},
		{"성원", "Seongwon"}, {"세진", "Sejin"}, {"신성", "Sinseong"}, {"아람", "Aram"}, {"영진", "Yeongjin"},
		{"우성", "Useong"}, {"유진", "Yujin"}, {"일신", "Ilsin"}, {"제일", "Jeil"}, {"중앙", "Jungang"},
		{"진흥", "Jinheung"}, {"청솔", "Cheongsol"}, {"태평", "Taepyeong"}, {"한결", "Hangyeol"}, {"한빛", "Hanbit"},
		{"해오름", "Haeoreum"}, {"화성", "Hwaseong"}, {"금강", "Geumgang"}, {"남해", "Namhae"}, {"푸른", "Pureun"},
		{"삼정", "Samjeong"}, {"국제", "Gukje"}, {"동아", "Donga"}, {"보성", "Boseong"}, {"성지", "Seongji"},
		{"우림", "Urim"}, {"정우", "Jeongwu"}, {"한신", "Hanshin"}, {"계룡", "Gyeryong"}, {"동원", "Dongwon"},
	}
	nameMiddles = []namePart{
		{"", ""}, {"", ""}, {"", ""}, {"종합", "General "}, {"산업", "Industrial "}, {"개발", "Development "},
		{"글로벌", "Global "}, {"에코", "Eco "}, {"스마트", "Smart "}, {"코리아", "Korea "}, {"신", "New "},
	}

	constructionSuffixes = []namePart{
		{"건설", "Construction Co., Ltd."}, {"토건", "Engineering & Construction Co., Ltd."},
		{"이앤씨", "E&C Co., Ltd."}, {"건영", "Construction Co., Ltd."}, {"주택", "Housing Co., Ltd."},
		{"엔지니어링", "Engineering Co., Ltd."},
	}
	otherSuffixes = []namePart{
		{"전자", "Electronics Co., Ltd."}, {"화학", "Chemical Co., Ltd."}, {"식품", "Foods Co., Ltd."},
		{"제약", "Pharmaceutical Co., Ltd."}, {"물산", "Trading Co., Ltd."}, {"정밀", "Precision Co., Ltd."},
		{"바이오", "Bio Inc."}, {"로지스", "Logis Co., Ltd."}, {"소프트", "Soft Inc."}, {"시멘트", "Cement Co., Ltd."},
		{"철강", "Steel Co., Ltd."}, {"레미콘", "Remicon Co., Ltd."},
	}
)

// Shares of the universe with a property.
const (
	constructionShare = 0.25
	listedShare       = 0.40
	kospiShare        = 0.45
	distressedShare   = 0.05 // of construction companies
	dropShare         = 0.06 // of listed construction companies
)

// Date ranges the universe draws from.
var (
	modifyDateFrom = time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC)
	modifyDateDays = 11 * 365
	eventFrom      = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	eventDays      = 2 * 365
)

// newUniverse builds the n companies of seed.
func newUniverse(seed int64, n int) *universe {
	rng := newRand(newHasher(seed).str("universe"))
	companies := make([]Company, 0, n)
	codes := make(map[string]bool, n)
	stocks := map[string]bool{}
	names := make(map[string]bool, n)
	firstDistress, firstDrop := -1, -1
	for i := range n {
		var c Company
		for {
			c.CorpCode = fmt.Sprintf("%08d", 100_000+rng.IntN(1_900_000))
			if !codes[c.CorpCode] {
				codes[c.CorpCode] = true
				break
			}
		}
		c.Construction = rng.Float64() < constructionShare
		listed := rng.Float64() < listedShare
		kospi := rng.Float64() < kospiShare
		prefix := namePrefixes[rng.IntN(len(namePrefixes))]
		middle := nameMiddles[rng.IntN(len(nameMiddles))]
		suffixes := otherSuffixes
		if c.Construction {
			suffixes = constructionSuffixes
		}
		suffix := suffixes[rng.IntN(len(suffixes))]
		c.Name = prefix.ko + middle.ko + suffix.ko
		c.EngName = prefix.en + " " + middle.en + suffix.en
		for k := 2; names[c.Name]; k++ {
			c.Name = fmt.Sprintf("%s%s제%d%s", prefix.ko, middle.ko, k, suffix.ko)
			c.EngName = fmt.Sprintf("%s %sNo.%d %s", prefix.en, middle.en, k, suffix.en)
		}
		names[c.Name] = true
		if listed {
			for {
				c.StockCode = fmt.Sprintf("%06d", (1_000+rng.IntN(99_000))*10)
				if !stocks[c.StockCode] {
					stocks[c.StockCode] = true
					break
				}
			}
			c.Market = "KOSDAQ"
			if kospi {
				c.Market = "KOSPI"
			}
		}
		perm := rng.Perm(len(lawdCodes))
		for _, j := range perm[:1+rng.IntN(3)] {
			c.MainRegions = append(c.MainRegions, lawdCodes[j])
		}
		slices.Sort(c.MainRegions)
		c.ModifyDate = modifyDateFrom.AddDate(0, 0, rng.IntN(modifyDateDays)).Format("20060102")
		distress := rng.Float64()
		drop := rng.Float64()
		dropDay := rng.IntN(eventDays)
		if c.Construction {
			c.Distressed = distress < distressedShare
			if firstDistress < 0 {
				firstDistress = i
			}
			if listed {
				if drop < dropShare {
					c.DropStart = eventFrom.AddDate(0, 0, dropDay)
				}
				if firstDrop < 0 {
					firstDrop = i
				}
			}
		}
		companies = append(companies, c)
	}
	// Even a small universe has one distressed company and one drop, when it
	// has candidates, so that tests of the radar always have something to
	// find.
	if firstDistress >= 0 && !slices.ContainsFunc(companies, func(c Company) bool { return c.Distressed }) {
		companies[firstDistress].Distressed = true
	}
	if firstDrop >= 0 && !slices.ContainsFunc(companies, func(c Company) bool { return !c.DropStart.IsZero() }) {
		companies[firstDrop].DropStart = eventFrom.AddDate(0, 0, int(newHasher(seed).str("drop").sum()%uint64(eventDays)))
	}
	slices.SortFunc(companies, func(a, b Company) int { return strings.Compare(a.CorpCode, b.CorpCode) })

	u := &universe{
		companies: companies,
		byCode:    make(map[string]int, n),
		corpXML:   make([][]byte, n),
	}
	for i, c := range companies {
		u.byCode[c.CorpCode] = i
		if c.StockCode != "" {
			u.listed = append(u.listed, i)
		}
		u.corpXML[i] = corpXMLEntry(c)
	}
	slices.SortFunc(u.listed, func(a, b int) int {
		return strings.Compare(companies[a].StockCode, companies[b].StockCode)
	})
	return u
}

// company returns the company with corpCode.
func (u *universe) company(corpCode string) (*Company, int, bool) {
	i, ok := u.byCode[corpCode]
	if !ok {
		return nil, 0, false
	}
	return &u.companies[i], i, true
}

// corpXMLEntry renders c as a <list> element of CORPCODE.xml. Like DART, an
// unlisted company's stock_code is a single space.
func corpXMLEntry(c Company) []byte {
	var b bytes.Buffer
	stock := c.StockCode
	if stock == "" {
		stock = " "
	}
	b.WriteString("\t<list>\n\t\t<corp_code>")
	b.WriteString(c.CorpCode)
	b.WriteString("</corp_code>\n\t\t<corp_name>")
	_ = xml.EscapeText(&b, []byte(c.Name))
	b.WriteString("</corp_name>\n\t\t<corp_eng_name>")
	_ = xml.EscapeText(&b, []byte(c.EngName))
	b.WriteString("</corp_eng_name>\n\t\t<stock_code>")
	b.WriteString(stock)
	b.WriteString("</stock_code>\n\t\t<modify_date>")
	b.WriteString(c.ModifyDate)
	b.WriteString("</modify_date>\n\t</list>\n")
	return b.Bytes()
}

// hasher derives deterministic pseudo-random numbers from a seed and labels
// (FNV-1a over the labels, finished with splitmix64), without allocating.
type hasher struct{ h uint64 }

// newHasher starts a hash from seed.
func newHasher(seed int64) hasher {
	return hasher{h: mix64(uint64(seed) ^ 0xcbf29ce484222325)}
}

// str adds s to the hash.
func (h hasher) str(s string) hasher {
	x := h.h
	for i := 0; i < len(s); i++ {
		x ^= uint64(s[i])
		x *= 0x100000001b3
	}
	x ^= 0xff // separator, so that ("ab","c") differs from ("a","bc")
	x *= 0x100000001b3
	return hasher{h: x}
}

// num adds n to the hash.
func (h hasher) num(n int64) hasher {
	return hasher{h: mix64(h.h ^ uint64(n)*0x9e3779b97f4a7c15)}
}

// sum returns the hash.
func (h hasher) sum() uint64 { return mix64(h.h) }

// unit returns the hash as a number in [0, 1).
func (h hasher) unit() float64 { return unitOf(h.sum()) }

// unitOf maps x to [0, 1).
func unitOf(x uint64) float64 { return float64(x>>11) / (1 << 53) }

// mix64 is splitmix64's finaliser.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// newRand returns a generator seeded from h.
func newRand(h hasher) *rand.Rand {
	s := h.sum()
	return rand.New(rand.NewPCG(s, mix64(s^0x5851f42d4c957f2d)))
}

// roundTo rounds f to the nearest multiple of step.
func roundTo(f float64, step int64) int64 {
	return int64(math.Round(f/float64(step))) * step
}
