package conformance

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Under a deadline a check gets the time left less the margin and the
// reserves of the checks after it, at most DefaultTimeout; near it, up to
// half the time left until a check has run past its time, and the time a
// check gets once those before it hung after; at it, none.
func TestCheckTimeEndsBeforeTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		left time.Duration
		rest int
		hung bool
		want time.Duration
	}{
		{time.Hour, 66, false, DefaultTimeout},
		{10 * time.Minute, 66, true, DefaultTimeout},
		{4 * time.Minute, 66, true, 4*time.Minute - 6*time.Second - 132*time.Second},
		{2 * time.Minute, 0, true, 2*time.Minute - 6*time.Second},
		{2 * time.Minute, 66, false, 30 * time.Second},
		{2 * time.Minute, 66, true, time.Second},
		{30 * time.Second, 66, false, 12 * time.Second},
		{6500 * time.Millisecond, 3, true, 500 * time.Millisecond},
		{6500 * time.Millisecond, 3, false, 500 * time.Millisecond},
		{6 * time.Second, 0, false, 0},
		{-time.Second, 0, false, 0},
	} {
		require.Equal(t, tc.want, checkTime(tc.left, tc.rest, tc.hung), "%v left, %d checks after, hung %v", tc.left, tc.rest, tc.hung)
	}
	// Every check hanging, each is reported before the deadline: the time
	// each takes (its own and the grace) leaves the margin at the end.
	left, hung, reported := 10*time.Minute, false, 0
	for rest := 66; rest >= 0; rest-- {
		d := checkTime(left, rest, hung)
		if d == 0 {
			break
		}
		left -= d + checkGrace
		hung = true
		reported++
	}
	require.Equal(t, 67, reported)
	require.GreaterOrEqual(t, left, deadlineMargin)
}

// TestStorage under go test -timeout, with a storage that hangs in every
// check, ends before the deadline with every check reported: each check
// had 5 minutes, and the test binary panicked (test timed out) during the
// second, with none reported.
func TestAHangingStorageIsReportedBeforeTheDeadline(t *testing.T) {
	if os.Getenv("VKRT_CONFORMANCE_HANGING_STORAGE") == "1" {
		TestStorage(t, func(StorageConfig) (StorageTarget, error) { select {} })
		return
	}
	if testing.Short() {
		t.Skip("runs the test binary for 16 s")
	}
	const timeout = 16 * time.Second
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.timeout="+timeout.String())
	cmd.Env = append(os.Environ(), "VKRT_CONFORMANCE_HANGING_STORAGE=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	t.Logf("%v, %v:\n%s", took.Round(time.Millisecond), err, out)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the test with a hanging storage fails")
	require.NotContains(t, string(out), "test timed out")
	require.Less(t, took, timeout)
	for _, ch := range StorageChecks() {
		require.Regexp(t, `(?m)^    --- FAIL: `+regexp.QuoteMeta(t.Name()+"/"+ch.Name)+` `, string(out), "%s is reported", ch.Name)
	}
	require.Contains(t, string(out), "the check did not finish within 1s (the time left it before the test's deadline, go test -timeout)")
	require.Contains(t, string(out), "not run: the test's deadline (go test -timeout) is")
	require.False(t, strings.Contains(string(out), "the check did not finish within 5m"))
}
