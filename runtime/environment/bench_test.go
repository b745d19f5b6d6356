package environment

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkPut is the cost of one record: one synchronous transaction.
func BenchmarkPut(b *testing.B) {
	env, err := Open("bench", WithDir(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer env.Close()
	rec := payload(1) // a few KiB, about a memory record of a dozen pools
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		if _, err := env.Put(ctx, "step "+strconv.Itoa(i), rec); err != nil {
			b.Fatal(err)
		}
	}
}
