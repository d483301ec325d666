package observability

// runFilterBits is the size of a runFilter's bit set, as a power of two:
// 2^20 bits (128 KiB) keep false positives rare for the few tens of
// thousands of runs a worker's keys make.
const runFilterBits = 20

// runHashBase is the multiplier of runHash (the 64-bit FNV prime: odd, so
// the rolling update loses nothing).
const runHashBase = 1099511628211

// runHashLead is runHashBase^(MinSecretRun-1): the weight of the first
// byte of a run, removed when the run slides on.
var runHashLead = func() uint64 {
	p := uint64(1)
	for range MinSecretRun - 1 {
		p *= runHashBase
	}
	return p
}()

// runFilter is a one-hash Bloom filter over the runs of MinSecretRun
// characters of the secrets' forms: a text position whose run is not in
// it holds no secret's run, which one bit test tells, so the scrubber
// looks a run up in its map only where the bit is set.
type runFilter struct {
	bits []uint64
}

func newRunFilter() runFilter {
	return runFilter{bits: make([]uint64, 1<<runFilterBits/64)}
}

// runHash is the polynomial hash of s that runFilter.each rolls.
func runHash(s string) uint64 {
	var h uint64
	for i := 0; i < len(s); i++ {
		h = h*runHashBase + uint64(s[i])
	}
	return h
}

// slot returns the word and bit of hash h.
func slot(h uint64) (int, uint64) {
	i := (h * 0x9e3779b97f4a7c15) >> (64 - runFilterBits)
	return int(i / 64), 1 << (i % 64)
}

// add records the run whose hash is h.
func (f runFilter) add(h uint64) {
	word, bit := slot(h)
	f.bits[word] |= bit
}

// each calls fn with the start of every run of MinSecretRun bytes of text
// that the filter may hold, rolling the hash along text.
func (f runFilter) each(text string, fn func(i int)) {
	if len(text) < MinSecretRun {
		return
	}
	h := runHash(text[:MinSecretRun])
	for i := 0; ; i++ {
		if word, bit := slot(h); f.bits[word]&bit != 0 {
			fn(i)
		}
		if i+MinSecretRun >= len(text) {
			return
		}
		h = (h-uint64(text[i])*runHashLead)*runHashBase + uint64(text[i+MinSecretRun])
	}
}
