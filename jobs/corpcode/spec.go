package corpcode

import (
	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/queue/batch"
)

// Name is the name of the DART corp-code job.
const Name = "corpCodeSync"

// ChunkSize is how many companies of the archive one chunk loads.
const ChunkSize = 1000

// Params are corpCodeSync's params: it has none. The API names their
// schema CorpCodeSyncParams, after the job.
type Params struct{}

// Spec defines corpCodeSync: DART's corp-code archive (one download)
// loaded into company in chunks of 1,000.
//
// Coverage: none. Its target set is the archive itself, which only a
// download shows (the service keeps the file's company count per instance,
// not per day), and company rows are upserted and never deleted, so "the
// rows of the archive are in company" cannot go below 100% after a first
// load: a count would be a gauge that never moves. Its freshness alert
// (BuildriskJobNotCompleted) is the signal that matters.
func Spec() *catalog.Spec[Params] {
	return &catalog.Spec[Params]{
		JobName: Name,
		Desc: "Downloads DART's corp-code archive (every company, one call) to a temporary file and upserts it into " +
			"company, marking construction companies as tracked. A resumed run reuses the file while it exists and " +
			"downloads it again, reading it from the start, when it is gone.",
		ProviderName:    "DART",
		ChunkDesc:       "1,000 companies of the archive (the download is the only call)",
		ExampleValue:    Params{},
		DefaultSchedule: "0 6 * * *",
		Estimate:        func(*Params) int { return 1 },
	}
}

// Registration is corpCodeSync as a process registers it: its definition
// and its implementation, which downloads into DirDefault.
func Registration() batch.Registration {
	return batch.Registration{Definition: Spec(), Job: Job{}}
}
