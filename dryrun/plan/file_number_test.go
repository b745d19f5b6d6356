package plan

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/strictjson"
)

// A number too big for its field is quoted in the error as strictjson
// quotes it, at most 40 bytes: a file of a megabyte-long number made an
// error (and a line on stderr) a megabyte long.
func TestPlanFileHugeNumberIsQuotedShort(t *testing.T) {
	huge := "1" + strings.Repeat("0", 1<<20)
	for _, doc := range []string{
		`{"vkrt_plan":3,"device":{"alignment":16,"max_page_size":1,"memory_size":` + huge + `,"sparse_granule":0},"traces":[],"layout":"Virtual"}`,
		`{"vkrt_plan":3.` + strings.Repeat("0", 1<<20) + `,"device":{"alignment":16,"max_page_size":1,"memory_size":1,"sparse_granule":0},"traces":[],"layout":"Virtual"}`,
	} {
		_, err := DecodeFile([]byte(doc))
		require.ErrorIs(t, err, strictjson.ErrNumberDoesNotFit)
		// Past the number, the error says what is wrong with it (its
		// range, a fractional part) in under 100 bytes.
		require.Less(t, len(err.Error()), 300, "the error quotes the number short")
		require.Contains(t, err.Error(), "…")
	}
}
