package conformance_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vkrt/vkrt/conformance"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// slowFailingMemory takes 2 ms per read and fails every one.
type slowFailingMemory struct{ cpuMemory }

func (m slowFailingMemory) Download(src vkruntime.StorageHandle, dst []byte) error {
	time.Sleep(2 * time.Millisecond)
	return errors.New("read failed")
}

// A check that ran past its time says so, however much else it saw: the
// timeout is the first thing a reader of the report needs to know.
func TestATimedOutCheckSaysSoPastItsEvidenceCap(t *testing.T) {
	ns := func(cfg conformance.StorageConfig) (conformance.StorageTarget, error) {
		tg, d, err := cpuTarget(cfg, 1, 1)
		if err != nil {
			return tg, err
		}
		tg.Memory = slowFailingMemory{cpuMemory{d}}
		return tg, nil
	}
	const timeout = 100 * time.Millisecond
	rep := conformance.RunStorage(context.Background(), ns, conformance.Options{Run: regexp.MustCompile(`^storage/churn-integrity$`), Timeout: timeout})
	r := rep.Results[0]
	t.Logf("%s: %s in %v, %d evidence lines, last %q", r.Check, r.Status, r.Duration, len(r.Evidence), r.Evidence[len(r.Evidence)-1])
	if r.Duration < timeout {
		t.Fatalf("the check did not run past its time (%v); the reproducer needs it to", r.Duration)
	}
	for _, e := range r.Evidence {
		if strings.Contains(e, "past its time") || strings.Contains(e, "did not finish within") {
			return
		}
	}
	t.Fatalf("storage/churn-integrity ran %v under a timeout of %v, yet no evidence line says so: %q", r.Duration.Round(time.Millisecond), timeout, r.Evidence)
}
