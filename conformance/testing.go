package conformance

import (
	"context"
	"strings"
	"testing"
)

// TestStorage checks a runtime.Storage against the contract, one subtest
// per check when t is a *testing.T. Every broken rule is an error naming
// the check, the rule and the evidence; a check the storage lacks a
// capability for is skipped as not supported. newStorage is called for a
// fresh storage by every check that needs one.
func TestStorage(t testing.TB, newStorage NewStorage) {
	t.Helper()
	runTB(t, storageChecks(newStorage))
}

// TestDevice checks a whole device through the clients open makes (a fresh
// one for each check: DefaultDevice(0) for the first device of the backend
// linked in), one subtest per check when t is a *testing.T. It runs the
// storage checks on the device's own storage too.
func TestDevice(t testing.TB, open OpenClient) {
	t.Helper()
	runTB(t, deviceChecks(open))
}

func runTB(t testing.TB, checks []Check) {
	t.Helper()
	for _, ch := range checks {
		if tt, ok := t.(*testing.T); ok {
			tt.Run(ch.Name, func(t *testing.T) {
				t.Helper()
				reportTB(t, runCheck(context.Background(), ch, 0), true)
			})
			continue
		}
		reportTB(t, runCheck(context.Background(), ch, 0), false)
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
