package htmlreport

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPercentKeepsSmallAndNearlyWholeDifferences(t *testing.T) {
	for f, want := range map[float64]string{
		0.24:     "24",
		0.003:    "0.3",
		0.0004:   "0.04",
		0.99995:  "99.995",
		0.996:    "99.6",
		0:        "0.0",
		1:        "100",
		0.015:    "2",
		0.999999: "100.000",
	} {
		require.Equal(t, want, percent(f), "%v", f)
	}
}
