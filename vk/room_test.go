package vk

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// The running total admits an allocation only under the heap, the limit,
// the budget (counting the process's other use of the heap) and the
// allocation count; each refusal names its reason.
func TestRoomAdmitsOnlyUnderEveryBound(t *testing.T) {
	const gib = 1 << 30
	base := room{allocated: 1 * gib, heap: 4 * gib, maxAllocations: 100, allocations: 10}
	require.Empty(t, base.refuse(3*gib), "exactly filling the heap fits")
	require.Contains(t, base.refuse(3*gib+1), "the heap")
	require.Contains(t, base.refuse(math.MaxUint64), "the heap", "a size that wraps the total is refused")

	limited := base
	limited.limit = 2 * gib
	require.Empty(t, limited.refuse(gib))
	require.Contains(t, limited.refuse(gib+1), "memory limit: 1073741824 B held, 1073741824 B free")

	// 3 GiB budget; the process uses 1.5 GiB, 1 GiB of it this storage's:
	// others hold 0.5 GiB, so 1.5 GiB more fits and a byte past it does not.
	budgeted := base
	budgeted.budget, budgeted.usage = 3*gib, 3*gib/2
	require.Empty(t, budgeted.refuse(3*gib/2))
	require.Contains(t, budgeted.refuse(3*gib/2+1), "the heap's budget: 3221225472 B")
	// Usage below what the storage holds (the driver's figure lags) counts
	// no others.
	budgeted.usage = gib / 2
	require.Empty(t, budgeted.refuse(2*gib))
	noBudget := base
	noBudget.usage = 100 * gib
	require.Empty(t, noBudget.refuse(gib), "no budget, no budget check")

	full := base
	full.allocations = 100
	require.Contains(t, full.refuse(1), "allows 100 allocations")
}
