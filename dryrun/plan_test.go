package dryrun

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/memory"
)

func TestPlanShippedTracesQuick(t *testing.T) {
	for _, path := range sharedTraces(t) {
		tr, err := ReadTraceFile(path)
		require.NoError(t, err)
		for _, s := range []Strength{Basic, Strong} {
			pr, err := PlanTrace(tr, memory.SubSlicesLayout(), PlanOptions{Strength: s})
			require.NoError(t, err)
			t.Logf("%s %s: default %.3f (%d) plan %s %.4f (%d) spills %d", tr.Name, s, pr.DryRun.Ratio(), pr.DryRun.DriverAllocs, pr.Plan.Layout.Kind(), pr.Plan.Ratio(), pr.Plan.DriverAllocs, pr.Plan.Spills)
		}
	}
}
