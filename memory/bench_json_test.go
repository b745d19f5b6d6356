package memory_test

import (
	"path/filepath"
	"testing"

	json "github.com/goccy/go-json"

	dryreplay "github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/strictjson"
	"github.com/vkrt/vkrt/memory"
)

// BenchmarkDecodeRecord is the cost of reading back one memory record, as
// vkrt records and vkrt report --env do for each: gpt2_train's report
// under SubSlices, about 1.7 kB of JSON, decoded strictly.
func BenchmarkDecodeRecord(b *testing.B) {
	tr, err := trace.ReadFile(filepath.Join("..", "testdata", "traces", "gpt2_train.trace.gz"))
	if err != nil {
		b.Fatal(err)
	}
	r, err := dryreplay.Run(tr, memory.SubSlicesLayout(), dryreplay.Options{NoSparse: true})
	if err != nil {
		b.Fatal(err)
	}
	body, err := json.Marshal(memory.Record{Label: "step", Report: r.Report})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var rec memory.Record
		if err := strictjson.Unmarshal(body, &rec); err != nil {
			b.Fatal(err)
		}
	}
}
