package dryrun

import (
	"context"

	"github.com/vkrt/vkrt/memory"
)

// markKey is the context key of the innermost dry-run mark.
type markKey struct{}

// With marks ctx as a dry run: allocations under it are lazy, launches are
// validated and dropped, writes are dropped and reads return zeros.
func With(ctx context.Context) context.Context {
	return context.WithValue(ctx, markKey{}, true)
}

// RealRun opts a scope back into executing, inside a dry run or not: a
// measurement that must really run. A With inside it makes the scope dry
// again; the innermost mark wins.
func RealRun(ctx context.Context) context.Context {
	return context.WithValue(ctx, markKey{}, false)
}

// Active reports whether the innermost mark on ctx is a dry run. A nil
// ctx carries no mark: it is not a dry run, as context.Background is not.
func Active(ctx context.Context) bool {
	if ctx == nil {
		return false
	}
	dry, _ := ctx.Value(markKey{}).(bool)
	return dry
}

// Mapping is how allocations made under ctx map their pages: Lazy in a dry
// run, so no device memory backs them unless a real-run scope resolves them,
// Eager otherwise (a nil ctx among them).
func Mapping(ctx context.Context) memory.Mapping {
	if Active(ctx) {
		return memory.Lazy
	}
	return memory.Eager
}
