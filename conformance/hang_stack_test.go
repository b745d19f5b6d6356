package conformance_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/conformance"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// blockingStorage never returns from Alloc, as a storage waiting on a
// driver that never answers.
type blockingStorage struct{ vkruntime.Storage }

func (blockingStorage) Alloc(uint64) (vkruntime.StorageHandle, error) { select {} }

// A check that hangs names the call it hangs in: the verdict said only that
// it did not finish, which left a vendor to find the call by hand.
func TestAHungCheckSaysWhereItHangs(t *testing.T) {
	rep := conformance.RunStorage(context.Background(), func(cfg conformance.StorageConfig) (conformance.StorageTarget, error) {
		tg, _, err := cpuTarget(cfg, 1, 1)
		tg.Storage = blockingStorage{tg.Storage}
		return tg, err
	}, conformance.Options{Run: regexp.MustCompile(`^storage/alloc-fresh-handle$`), Timeout: 100 * time.Millisecond})
	require.Len(t, rep.Results, 1)
	r := rep.Results[0]
	require.Equal(t, conformance.Fail, r.Status)
	first, where, ok := strings.Cut(r.Evidence[0], "\n")
	require.True(t, ok, "the verdict says nothing past its first line: %q", r.Evidence[0])
	require.Equal(t, "the check did not finish within 100ms", first)
	require.Contains(t, where, "conformance_test.blockingStorage.Alloc", "the verdict names the call that never returned")
}
