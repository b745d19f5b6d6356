package dryrun

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/memory"
)

func TestMarksNestInnermostWins(t *testing.T) {
	base := context.Background()
	require.False(t, Active(base), "an unmarked context runs for real")

	dry := With(base)
	require.True(t, Active(dry))
	require.False(t, Active(base), "marking returns a new context")

	real := RealRun(dry)
	require.False(t, Active(real), "RealRun opts a scope of a dry run back in")
	require.True(t, Active(dry), "the enclosing scope stays dry")

	dryAgain := With(real)
	require.True(t, Active(dryAgain), "With inside RealRun is dry again")
	require.False(t, Active(RealRun(dryAgain)))

	// Unrelated values in between do not hide the mark.
	type other struct{}
	require.True(t, Active(context.WithValue(dry, other{}, 1)))
	cancelled, cancel := context.WithCancel(dry)
	cancel()
	require.True(t, Active(cancelled))
}

func TestMappingFollowsTheMarks(t *testing.T) {
	base := context.Background()
	require.Equal(t, memory.Eager, Mapping(base))
	require.Equal(t, memory.Lazy, Mapping(With(base)))
	require.Equal(t, memory.Eager, Mapping(RealRun(With(base))))
	require.Equal(t, memory.Lazy, Mapping(With(RealRun(With(base)))))
}

func TestANilContextIsNoDryRun(t *testing.T) {
	var ctx context.Context // a caller's zero value
	require.NotPanics(t, func() { require.False(t, Active(ctx)) })
	require.NotPanics(t, func() { require.Equal(t, memory.Eager, Mapping(ctx)) })
}
