package memory

import (
	"math"
	"strconv"
	"strings"

	"github.com/vkrt/vkrt/internal/saturate"
)

// Usage is one reading of a pool's or a manager's memory: live allocations,
// the bytes they asked for, the padding inside them and what the device holds.
type Usage struct {
	// NumberAllocs counts live allocations (slices), not pages.
	NumberAllocs uint64 `json:"number_allocs"`
	// BytesInUse are the bytes the live allocations asked for, without padding.
	BytesInUse uint64 `json:"bytes_in_use"`
	// BytesPadding are the bytes the live allocations occupy beyond what they
	// asked for.
	BytesPadding uint64 `json:"bytes_padding"`
	// BytesReserved is the memory reserved on the device, live or held for
	// reuse: at least BytesInUse+BytesPadding. Pages a pool holds unmapped
	// (a report's pages_unmapped: lazy pages, or pages whose memory went
	// back to the driver when it refused another) count at their size,
	// though the device holds none of their memory until they are mapped
	// again; an explicit cleanup gives them up.
	BytesReserved uint64 `json:"bytes_reserved"`
}

// Combine sums two readings, each field saturating at math.MaxUint64: no
// device's pools hold that much (a manager refuses a page that would take
// its own past it), but readings decoded from a report, or made up, may
// sum past it, and a sum that wrapped read as a few bytes.
func (u Usage) Combine(o Usage) Usage {
	return Usage{
		NumberAllocs:  saturate.Add(u.NumberAllocs, o.NumberAllocs),
		BytesInUse:    saturate.Add(u.BytesInUse, o.BytesInUse),
		BytesPadding:  saturate.Add(u.BytesPadding, o.BytesPadding),
		BytesReserved: saturate.Add(u.BytesReserved, o.BytesReserved),
	}
}

// String is the multi-line "Memory Usage Report:" text, each line ended by a
// newline. Percentages are computed in single precision as the reference
// runtime does, so an empty reading shows NaN.
func (u Usage) String() string {
	var b strings.Builder
	b.WriteString("Memory Usage Report:\n")
	b.WriteString(" Number of allocations: " + strconv.FormatUint(u.NumberAllocs, 10) + "\n")
	b.WriteString(" Bytes in use: " + FormatBytes(u.BytesInUse) + "\n")
	b.WriteString(" Bytes used for padding: " + FormatBytes(u.BytesPadding) + "\n")
	b.WriteString(" Total bytes reserved: " + FormatBytes(u.BytesReserved) + "\n")
	b.WriteString(" Usage efficiency: " + formatPercent(u.BytesInUse, u.BytesReserved) + "%\n")
	b.WriteString(" Padding overhead: " + formatPercent(u.BytesPadding, u.BytesInUse) + "%\n")
	return b.String()
}

// formatPercent is num/den*100 in float32, printed with two decimals the way
// Rust prints an f32 ("NaN", "inf").
func formatPercent(num, den uint64) string {
	p := float32(num) / float32(den) * 100
	switch {
	case p != p:
		return "NaN"
	case math.IsInf(float64(p), 1):
		return "inf"
	}
	return strconv.FormatFloat(float64(p), 'f', 2, 64)
}

// FormatBytes writes a byte count in powers of 1000 with two decimals:
// "999 B", "1.50 KB", "2.00 GB".
func FormatBytes(n uint64) string {
	const unit = 1000
	if n < unit {
		return strconv.FormatUint(n, 10) + " B"
	}
	// A size that rounds up to 1000.00 of a prefix is shown in the next:
	// 999,999 B read "1000.00 KB".
	const prefixes = "KMGTPE"
	exp, div := 1, uint64(unit)
	for n/div >= unit && exp < len(prefixes) {
		exp, div = exp+1, div*unit
	}
	if exp < len(prefixes) && float64(n)/float64(div) >= unit-0.005 {
		exp, div = exp+1, div*unit
	}
	return strconv.FormatFloat(float64(n)/float64(div), 'f', 2, 64) + " " + prefixes[exp-1:exp] + "B"
}
