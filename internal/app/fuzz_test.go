package app_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/buildrisk/radar/catalog"
	"github.com/buildrisk/radar/internal/jobset"
)

// Every job's params decoder, on any input: no panic; a refusal is a
// *ParamError naming a field under params; accepted params decode again to
// the same canonical form (what resume identity relies on).
func FuzzDecodeParams(f *testing.F) {
	jobCatalog := jobset.Catalog()
	for _, def := range jobCatalog.All() {
		example, err := json.Marshal(def.Example())
		if err != nil {
			f.Fatal(err)
		}
		f.Add(def.Name(), string(example))
	}
	f.Add("aptTrade", `{"regions":["11110"],"from":"0000-01","to":"9999-12"}`)
	f.Add("filingParse", `{"from":"2025-01-01","to":"2025-01-01","corpCodes":[1]}`)
	f.Add("stockPrice", `{"date":"2025-02-30"}`)
	f.Add("metrics", `null`)
	f.Fuzz(func(t *testing.T, job, raw string) {
		for _, def := range jobCatalog.All() {
			if job != "" && def.Name() != job {
				continue
			}
			p, err := def.Decode(json.RawMessage(raw))
			if err != nil {
				var pe *catalog.ParamError
				if !errors.As(err, &pe) || pe.Field == "" || len(pe.Message) > 400 {
					t.Fatalf("%s: %q: not a short *ParamError naming a field: %#v", def.Name(), raw, err)
				}
				continue
			}
			again, err := def.Decode(p.Canonical)
			if err != nil {
				t.Fatalf("%s: canonical %s of %q does not decode: %v", def.Name(), p.Canonical, raw, err)
			}
			if string(again.Canonical) != string(p.Canonical) || again.EstimatedCalls != p.EstimatedCalls {
				t.Fatalf("%s: canonical form is not stable: %s then %s", def.Name(), p.Canonical, again.Canonical)
			}
			if p.EstimatedCalls < 0 {
				t.Fatalf("%s: negative estimate %d", def.Name(), p.EstimatedCalls)
			}
		}
	})
}
