package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrNotSupported is what a factory returns for a configuration the target
// cannot provide (a memory limit, say): the checks that need it report
// [NotSupported], never a pass. The zero configuration, a plain storage or
// device, every target provides: refusing it fails the check.
var ErrNotSupported = errors.New("conformance: not supported")

// Status is the result of one check.
type Status string

const (
	// Pass: the target honoured the rule.
	Pass Status = "pass"
	// Fail: the target broke the rule; the evidence says how.
	Fail Status = "fail"
	// NotSupported: the target lacks a capability the check needs, so the
	// rule could not be checked.
	NotSupported Status = "not supported"
)

// Check is one rule of the contract and the code that checks it.
type Check struct {
	// Name is stable across releases: CI systems and --run select by it.
	Name string
	// Rule is the contract in one sentence.
	Rule string
	run  func(c *checkState)
}

// checkState is what a running check reports through. Errorf records a
// misbehaviour and carries on, so one check reports all it sees; Fatalf
// and NotSupportedf stop the check.
type checkState struct {
	ctx context.Context

	mu       sync.Mutex
	evidence []string
	dropped  int
	reason   string
	cleanups []func()
	// exits counts the goroutines Fatalf and NotSupportedf are ending
	// whose ending the check has not yet seen: any other runtime.Goexit
	// in a goroutine of the check is the target's.
	exits int
	// running holds the ids of the check's goroutines (its own and those
	// of Go) not yet ended: where a check that hangs is, for its verdict.
	running map[uint64]bool
}

// enter and leave keep running up to date; each goroutine of the check
// calls enter first and defers leave.
func (c *checkState) enter() uint64 {
	id := goroutineID()
	c.mu.Lock()
	if c.running == nil {
		c.running = map[uint64]bool{}
	}
	c.running[id] = true
	c.mu.Unlock()
	return id
}

func (c *checkState) leave(id uint64) {
	c.mu.Lock()
	delete(c.running, id)
	c.mu.Unlock()
}

// goroutineID is the calling goroutine's number, from its stack's header
// ("goroutine 18 [running]:").
func goroutineID() uint64 {
	var buf [64]byte
	header := buf[:runtime.Stack(buf[:], false)]
	header = bytes.TrimPrefix(header, []byte("goroutine "))
	id, _, _ := bytes.Cut(header, []byte(" "))
	n, _ := strconv.ParseUint(string(id), 10, 64)
	return n
}

// maxHungStacks bounds the stacks a hung check's verdict shows.
const maxHungStacks = 3

// hungStacks is where the check's goroutines that have not ended are, the
// top of each stack: a check that hangs said only that it did not finish,
// not which call of the target never returned.
func (c *checkState) hungStacks() string {
	c.mu.Lock()
	ids := slices.Sorted(maps.Keys(c.running))
	c.mu.Unlock()
	if len(ids) == 0 {
		return ""
	}
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= 64<<20 {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, " [")
		id, err := strconv.ParseUint(strings.TrimPrefix(header, "goroutine "), 10, 64)
		if err != nil || !slices.Contains(ids, id) {
			continue
		}
		if len(out) == maxHungStacks {
			out = append(out, fmt.Sprintf("… and %d more", len(ids)-maxHungStacks))
			break
		}
		out = append(out, trimStack([]byte(g)))
	}
	if len(out) == 0 {
		return ""
	}
	return "\nwhere it was then:\n" + strings.Join(out, "\n")
}

// maxEvidence bounds what one check keeps; the rest are counted.
const maxEvidence = 20

// Context is cancelled when the check runs past its time.
func (c *checkState) Context() context.Context { return c.ctx }

// Errorf records a misbehaviour and lets the check go on.
func (c *checkState) Errorf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.evidence) >= maxEvidence {
		c.dropped++
		return
	}
	c.evidence = append(c.evidence, fmt.Sprintf(format, args...))
}

// verdictf records what ended the check (its time ran out) first, past
// the cap on evidence: a check at its cap lost the line that said it timed
// out, and read as the device's fault.
func (c *checkState) verdictf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evidence = slices.Insert(c.evidence, 0, fmt.Sprintf(format, args...))
	if len(c.evidence) > maxEvidence {
		c.evidence = c.evidence[:maxEvidence]
		c.dropped++
	}
}

// Fatalf records a misbehaviour and stops the check; like testing.T's, it
// must be called from the check's own goroutine.
func (c *checkState) Fatalf(format string, args ...any) {
	c.Errorf(format, args...)
	c.mu.Lock()
	c.exits++
	c.mu.Unlock()
	runtime.Goexit()
}

// NotSupportedf stops the check: the target lacks what it needs. A check
// that already recorded a misbehaviour still fails.
func (c *checkState) NotSupportedf(format string, args ...any) {
	c.mu.Lock()
	c.reason = fmt.Sprintf(format, args...)
	c.exits++
	c.mu.Unlock()
	runtime.Goexit()
}

// ended is deferred by each goroutine of a check (its own, those of Go and
// each cleanup) with what the goroutine was: one that neither returned nor
// panicked was ended by runtime.Goexit, and where neither Fatalf nor
// NotSupportedf called it, the target did (t.Fatal or require on a
// *testing.T of its own, inside Alloc or Dispatch, say). The check checked
// nothing past that call, so it fails rather than pass.
func (c *checkState) ended(what string, returned bool, p any) {
	if p != nil || returned {
		return
	}
	c.mu.Lock()
	ours := c.exits > 0
	if ours {
		c.exits--
	}
	c.mu.Unlock()
	if !ours {
		c.Errorf("%s ended without finishing: the target ended its goroutine (runtime.Goexit, as t.Fatal does)\n%s", what, trimStack(debug.Stack()))
	}
}

// Go runs f in a goroutine of the check's own, as wg.Go does: a panic in
// it (a device misbehaving under concurrent use) is recorded as a failure
// of the check instead of ending the whole run, and Fatalf in it ends that
// goroutine only.
func (c *checkState) Go(wg *sync.WaitGroup, f func()) {
	wg.Go(func() {
		defer c.leave(c.enter())
		returned := false
		defer func() {
			p := recover()
			if p != nil {
				c.Errorf("panic in a goroutine of the check: %v\n%s", p, trimStack(debug.Stack()))
			}
			c.ended("a goroutine of the check", returned, p)
		}()
		f()
		returned = true
	})
}

// Cleanup runs f when the check ends, last registered first.
func (c *checkState) Cleanup(f func()) {
	c.mu.Lock()
	c.cleanups = append(c.cleanups, f)
	c.mu.Unlock()
}

// need stops the check as not supported when err says the factory cannot
// provide what was asked, and fails it on any other error.
func (c *checkState) need(err error, what string) {
	if err == nil {
		return
	}
	if errors.Is(err, ErrNotSupported) {
		c.NotSupportedf("%s: %v", what, err)
	}
	c.Fatalf("%s: %v", what, err)
}

// needPlain is need for the zero configuration, a plain storage or device
// (target names which), which a factory may not refuse: were that not
// supported, a target refusing everything would make a run OK with no
// check passed.
func (c *checkState) needPlain(err error, what, target string) {
	if errors.Is(err, ErrNotSupported) {
		c.Fatalf("%s: %v: the target must provide a %s with no options (ErrNotSupported is for a configuration it cannot provide)", what, err, target)
	}
	c.need(err, what)
}

// Result is the outcome of one check.
type Result struct {
	Check  string `json:"check"`
	Rule   string `json:"rule"`
	Status Status `json:"result"`
	// Duration is the check's time, and Seconds the same in seconds, what
	// JSON holds: a Result read back has Seconds alone, which the writers
	// of a Report then use.
	Duration time.Duration `json:"-"`
	Seconds  float64       `json:"seconds"`
	// Evidence is every misbehaviour seen, for a failure.
	Evidence []string `json:"evidence,omitempty"`
	// Reason is the missing capability, for not supported.
	Reason string `json:"reason,omitempty"`
}

// Options select and bound the checks of a run.
type Options struct {
	// Run, when set, keeps only the checks whose name it matches.
	Run *regexp.Regexp
	// Timeout bounds each check; 0 is DefaultTimeout. A check past it fails.
	Timeout time.Duration
	// Started, when set, is called before each check with its position.
	Started func(i, n int, ch Check)
	// Finished, when set, is called with each result.
	Finished func(i, n int, r Result)
	// Target, when set, is the report's target. Without it RunDevice
	// opens the device once before the checks to read its name; a caller
	// that opened it already (vkrt conformance, to find whether it opens
	// at all) names it here, and the device is opened by the checks only.
	Target string
}

// DefaultTimeout bounds one check when Options.Timeout is 0.
const DefaultTimeout = 5 * time.Minute

func (o Options) selected(checks []Check) []Check {
	if o.Run == nil {
		return checks
	}
	var out []Check
	for _, ch := range checks {
		if o.Run.MatchString(ch.Name) {
			out = append(out, ch)
		}
	}
	return out
}

// runChecks runs the selected checks one after another. Once ctx ends
// (the run interrupted), no check starts: the one it stopped and those
// after it are listed as not run, with what ended the run, since a check
// cut short gives no verdict on the rule.
func runChecks(ctx context.Context, suite string, checks []Check, o Options) Report {
	checks = o.selected(checks)
	rep := Report{Suite: suite, Target: o.Target, Started: time.Now().UTC()}
	for i, ch := range checks {
		if ctx.Err() != nil {
			rep.interrupt(ctx, checks[i:])
			break
		}
		if o.Started != nil {
			o.Started(i, len(checks), ch)
		}
		r := runCheck(ctx, ch, o.Timeout, "")
		if ctx.Err() != nil {
			rep.interrupt(ctx, checks[i:])
			break
		}
		if o.Finished != nil {
			o.Finished(i, len(checks), r)
		}
		rep.Results = append(rep.Results, r)
	}
	return rep
}

// interrupt records a run that ctx ended before checks had run.
func (r *Report) interrupt(ctx context.Context, checks []Check) {
	r.Interrupted = context.Cause(ctx).Error()
	for _, ch := range checks {
		r.NotRun = append(r.NotRun, ch.Name)
	}
}

// checkGrace is how long a check past its time is given to stop before
// the run goes on without it.
const checkGrace = time.Second

// runCheck runs one check in a goroutine of its own, so Fatalf can stop it,
// a panic becomes a failure and a check that hangs is reported rather than
// hanging the suite. cut, when set, says what cut the check's time short of
// the timeout asked, for the verdict of a check past it.
func runCheck(ctx context.Context, ch Check, timeout time.Duration, cut string) Result {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := &checkState{ctx: ctx}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		defer c.leave(c.enter())
		defer c.runCleanups()
		returned := false
		defer func() {
			p := recover()
			if p != nil {
				c.Errorf("panic: %v\n%s", p, trimStack(debug.Stack()))
			}
			c.ended("the check", returned, p)
		}()
		ch.run(c)
		returned = true
	}()
	select {
	case <-done:
	case <-ctx.Done():
		// Past its time: the check fails whether or not it then stops
		// within the grace second, since what it saw after its context
		// ended proves nothing. (A run cancelled under it waits the same
		// second; runChecks then lists the check as not run.)
		if cut != "" {
			cut = " (" + cut + ")"
		}
		select {
		case <-done:
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				c.verdictf("the check ran past its time of %v%s", timeout, cut)
			} else {
				c.verdictf("the check was stopped: %v", ctx.Err())
			}
		case <-time.After(checkGrace):
			c.verdictf("the check did not finish within %v%s%s", timeout, cut, c.hungStacks())
		}
	}
	d := time.Since(start)
	c.mu.Lock()
	defer c.mu.Unlock()
	r := Result{Check: ch.Name, Rule: ch.Rule, Duration: d, Seconds: d.Seconds()}
	switch {
	case len(c.evidence) > 0:
		r.Status, r.Evidence = Fail, slices.Clone(c.evidence) // a check past its time may still be adding
		if c.dropped > 0 {
			r.Evidence = append(r.Evidence, fmt.Sprintf("… and %d more", c.dropped))
		}
	case c.reason != "":
		r.Status, r.Reason = NotSupported, c.reason
	default:
		r.Status = Pass
	}
	return r
}

// runCleanups runs the check's cleanups, last registered first, each
// deferred: a cleanup that ends the goroutine (a Close calling t.Fatal)
// still lets the others run.
func (c *checkState) runCleanups() {
	c.mu.Lock()
	cleanups := c.cleanups
	c.cleanups = nil
	c.mu.Unlock()
	for _, f := range cleanups {
		defer c.runCleanup(f)
	}
}

func (c *checkState) runCleanup(f func()) {
	returned := false
	defer func() {
		p := recover()
		if p != nil {
			c.Errorf("panic in cleanup: %v", p)
		}
		c.ended("a cleanup of the check", returned, p)
	}()
	f()
	returned = true
}

// trimStack keeps the top of a panic's stack, where it happened.
func trimStack(stack []byte) string {
	lines := strings.Split(string(stack), "\n")
	if len(lines) > 24 {
		lines = lines[:24]
	}
	return strings.Join(lines, "\n")
}
