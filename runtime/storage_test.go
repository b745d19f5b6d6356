package runtime

import (
	"math"
	"strings"
	"testing"
)

// A handle whose range runs past 2^64 (what a hostile transfer asks for)
// is named as such in the errors that quote it: End wrapped, so vk's
// refusal of a 16 B copy at 2^64-16 read "[18446744073709551600, 0)".
func TestHandleStringNeverShowsAWrappedEnd(t *testing.T) {
	for _, c := range []struct {
		h    StorageHandle
		want string
	}{
		{StorageHandle{ID: 3, Offset: 16, Size: 32}, "storage 3 [16, 48)"},
		{StorageHandle{ID: 3, Offset: math.MaxUint64 - 15, Size: 16}, "storage 3 [18446744073709551600, +16 B, past 2^64)"},
		{StorageHandle{ID: 3, Offset: 16, Size: math.MaxUint64}, "storage 3 [16, +18446744073709551615 B, past 2^64)"},
		{StorageHandle{ID: 3, Offset: math.MaxUint64, Size: 0}, "storage 3 [18446744073709551615, 18446744073709551615)"},
	} {
		if got := c.h.String(); got != c.want {
			t.Errorf("%#v: %q, want %q", c.h, got, c.want)
		}
		if strings.Contains(c.want, "past") && strings.Contains(c.h.String(), ", 0)") {
			t.Errorf("%#v reads as an empty range at 0", c.h)
		}
	}
}
