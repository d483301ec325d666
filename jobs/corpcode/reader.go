package corpcode

import (
	"errors"
	"iter"
	"sync"

	"github.com/buildrisk/radar/upstream"
)

// readCorpCodes parses an archive, calling fn per company; tests count
// the passes through it.
var readCorpCodes = upstream.ReadCorpCodes

// errStopReading ends a parse early.
var errStopReading = errors.New("stop reading")

// chunkReader hands out an archive's companies chunk by chunk from one
// parse: chunks are processed in order, so each continues where the last
// one stopped, and the archive is parsed once per execution instead of once
// per chunk (which made a run O(n²) in the archive's size). Asking for an
// earlier chunk than the last starts a new parse.
type chunkReader struct {
	path string
	sum  string

	next func() (upstream.CorpCode, error, bool)
	stop func()
	pos  int // index of the company next() returns next
}

func newChunkReader(path, sum string) *chunkReader {
	return &chunkReader{path: path, sum: sum}
}

// read returns the companies of positions [first, end), fewer at the end
// of the archive.
func (r *chunkReader) read(first, end int) ([]upstream.CorpCode, error) {
	if r.next == nil || r.pos > first {
		r.close()
		path := r.path
		seq := func(yield func(upstream.CorpCode, error) bool) {
			err := readCorpCodes(path, func(c upstream.CorpCode) error {
				if !yield(c, nil) {
					return errStopReading
				}
				return nil
			})
			if err != nil && !errors.Is(err, errStopReading) {
				yield(upstream.CorpCode{}, err)
			}
		}
		r.next, r.stop = iter.Pull2(iter.Seq2[upstream.CorpCode, error](seq))
		r.pos = 0
	}
	var companies []upstream.CorpCode
	for r.pos < end {
		c, err, ok := r.next()
		if !ok {
			break
		}
		if err != nil {
			r.close()
			return nil, err
		}
		if r.pos >= first {
			companies = append(companies, c)
		}
		r.pos++
	}
	return companies, nil
}

// close ends the parse in progress, if any.
func (r *chunkReader) close() {
	if r.stop != nil {
		r.stop()
	}
	r.next, r.stop, r.pos = nil, nil, 0
}

// readers holds each running execution's chunkReader; a Job value is
// shared by every execution, so the state lives here, keyed by the
// execution's *batch.Run (unique in the process, unlike an execution id
// when several databases are in use, as in tests).
var readers sync.Map // *batch.Run → *chunkReader

// readerFor returns the execution's reader of the archive at path with
// SHA-256 sum, starting a new one when the archive changed.
func readerFor(execution any, path, sum string) *chunkReader {
	if v, ok := readers.Load(execution); ok {
		r := v.(*chunkReader)
		if r.path == path && r.sum == sum {
			return r
		}
		r.close()
	}
	r := newChunkReader(path, sum)
	readers.Store(execution, r)
	return r
}

// releaseReader ends and forgets the execution's reader.
func releaseReader(execution any) {
	if v, ok := readers.LoadAndDelete(execution); ok {
		v.(*chunkReader).close()
	}
}
