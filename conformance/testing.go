package conformance

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestStorage checks a runtime.Storage against the contract, one subtest
// per check when t is a *testing.T. Every broken rule is an error naming
// the check, the rule and the evidence; a check the storage lacks a
// capability for is skipped as not supported. newStorage is called for a
// fresh storage by every check that needs one. Where t has a deadline (go
// test -timeout), each check's time ends early enough for every check to be
// reported before it, a check that hangs as not finishing.
func TestStorage(t testing.TB, newStorage NewStorage) {
	t.Helper()
	runTB(t, storageChecks(newStorage))
}

// TestDevice checks a whole device through the clients open makes (a fresh
// one for each check: DefaultDevice(0) for the first device of the backend
// linked in), one subtest per check when t is a *testing.T. It runs the
// storage checks on the device's own storage too. Its checks end before
// t's deadline as TestStorage's do.
func TestDevice(t testing.TB, open OpenClient) {
	t.Helper()
	runTB(t, deviceChecks(open))
}

// Under go test, a test's deadline (-timeout) bounds the checks' time too:
// past it the test binary panics, reporting no check. Each check gets the
// time left less deadlineMargin, to report in, and less checkReserve for
// each check still to run, at most DefaultTimeout: where every check hangs,
// each is reported as not finishing before the deadline. Too near it for
// every reserve, a check gets checkReserve less the grace a check that
// hangs is waited for, but until one has run past its time it gets as much
// as half the time left, up to checkFloor: a slow check is likelier then
// than one that hangs.
const (
	deadlineMargin = 5 * time.Second
	checkReserve   = 2 * time.Second
	checkFloor     = 30 * time.Second
)

// checkTime is the time of a check with left before the test's deadline
// and rest checks after it, hung saying whether a check before it ran past
// its time; 0 where there is no time to run it.
func checkTime(left time.Duration, rest int, hung bool) time.Duration {
	left -= deadlineMargin + checkGrace
	if left <= 0 {
		return 0
	}
	floor := checkReserve - checkGrace
	if !hung {
		floor = max(floor, min(left/2, checkFloor))
	}
	d := max(left-time.Duration(rest)*checkReserve, min(left, floor))
	return min(d, DefaultTimeout).Truncate(time.Millisecond)
}

func runTB(t testing.TB, checks []Check) {
	t.Helper()
	deadline, bounded := time.Time{}, false
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		deadline, bounded = d.Deadline()
	}
	hung := false
	for i, ch := range checks {
		run := func(t testing.TB, subtest bool) {
			t.Helper()
			timeout, cut := DefaultTimeout, ""
			if bounded {
				left := time.Until(deadline)
				if timeout = checkTime(left, len(checks)-1-i, hung); timeout == 0 {
					t.Errorf("%s: not run: the test's deadline (go test -timeout) is %v away, too near to run it", ch.Name, left.Round(time.Millisecond))
					return
				}
				if timeout < DefaultTimeout {
					cut = "the time left it before the test's deadline, go test -timeout"
				}
			}
			r := runCheck(context.Background(), ch, timeout, cut)
			hung = hung || r.Duration >= timeout
			reportTB(t, r, subtest)
		}
		if tt, ok := t.(*testing.T); ok {
			tt.Run(ch.Name, func(t *testing.T) {
				t.Helper()
				run(t, true)
			})
			continue
		}
		run(t, false)
	}
}

func reportTB(t testing.TB, r Result, subtest bool) {
	t.Helper()
	switch r.Status {
	case Fail:
		t.Errorf("%s: broke the rule: %s\n\t%s", r.Check, r.Rule, strings.Join(r.Evidence, "\n\t"))
	case NotSupported:
		if subtest {
			t.Skipf("%s: not supported: %s", r.Check, r.Reason)
		}
		t.Logf("%s: not supported: %s", r.Check, r.Reason)
	}
}
