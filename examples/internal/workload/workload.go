// Package workload holds what the example guests share: deterministic
// inputs, buffers made and freed together, the check of the device's
// numbers against the CPU reference that ends a guest with a non-zero exit
// code on a mismatch, and the closing report on stdout, whose failed write
// ends it with one too.
package workload

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"

	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/wasmhost/guest"
)

// Tolerance is the largest relative error a float32 kernel may show
// against the float64 reference.
const Tolerance = 2e-3

// Random is n deterministic values uniform in [-scale, scale).
func Random(rng *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (2*rng.Float32() - 1) * scale
	}
	return v
}

// Constant is n copies of c.
func Constant(n int, c float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = c
	}
	return v
}

// Must ends the guest with exit code 2 and the error on stderr when err is
// not nil, as Check does.
func Must[T any](v T, err error) T {
	Check(err)
	return v
}

// Check ends the guest with exit code 2 when err is not nil, saying on
// stderr the example's name (as ParseSizes was given it), what it was
// doing (Doing) and err.
func Check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, failure(program, doing, err))
		os.Exit(2)
	}
}

// program is the example's name, doing what it does now: the context of
// Check's message.
var program, doing string

// Doing says what the guest does from now on, such as a step and its
// size, for Check to name with an error: "error: vkrt: EDQUOT:
// buffer_create: …" alone left a guest's user to guess which step of which
// example, and which of its sizes, went past the host's quota.
func Doing(format string, args ...any) { doing = fmt.Sprintf(format, args...) }

// failure is Check's message: "NAME: DOING: ERR", each part there is.
func failure(name, doing string, err error) string {
	msg := "error"
	if name != "" {
		msg = name
	}
	if doing != "" {
		msg += ": " + doing
	}
	return msg + ": " + err.Error()
}

// Buffers makes and frees the buffers of one step together.
type Buffers struct{ held []*guest.Buffer }

// Floats is a buffer holding v.
func (bs *Buffers) Floats(v []float32) *guest.Buffer {
	b := Must(guest.NewFloat32s(v))
	bs.held = append(bs.held, b)
	return b
}

// Empty is a zero-filled buffer of n floats.
func (bs *Buffers) Empty(n int) *guest.Buffer {
	b := Must(guest.NewBuffer(4 * uint64(n)))
	bs.held = append(bs.held, b)
	return b
}

// Free frees every buffer made so far.
func (bs *Buffers) Free() {
	for _, b := range bs.held {
		Check(b.Free())
	}
	bs.held = bs.held[:0]
}

// Expect compares the device's result in b with the reference want
// computes, and ends the guest with exit code 1 on a mismatch. In a dry run
// the device computed nothing (reads give zeros): the buffer is read, as a
// real run reads it, and nothing is compared.
func Expect(what string, b *guest.Buffer, reference func() []float32) {
	got := Must(b.Float32s())
	if guest.DryRun() {
		return
	}
	want := reference()
	if e, at := cpuref.MaxRelError(want, got); e > Tolerance {
		fmt.Fprintln(os.Stderr, mismatch(what, want, got, e, at))
		os.Exit(1)
	}
}

// mismatch says how got differs from want: at the element of the largest
// relative error e, or in length, where MaxRelError names no element (-1).
func mismatch(what string, want, got []float32, e float64, at int) string {
	if at < 0 || at >= len(want) || at >= len(got) {
		return fmt.Sprintf("MISMATCH %s: %d elements, want %d", what, len(got), len(want))
	}
	return fmt.Sprintf("MISMATCH %s: element %d: want %v, got %v (relative error %.3g > %.3g)", what, at, want[at], got[at], e, Tolerance)
}

// Finish writes the guest's closing line to stdout: summary, then that
// every output matched the CPU reference, or that a dry run computed
// nothing. A write that fails (a host refusing the guest's stdout, a full
// disk) ends the guest with exit code 2 and says so on stderr: the result
// was not reported, and exit code 0 would say it was.
func Finish(name, summary string) {
	if err := finish(os.Stdout, summary, guest.DryRun()); err != nil {
		fmt.Fprintf(os.Stderr, "%s: writing the result to stdout: %v\n", name, err)
		os.Exit(2)
	}
}

// finish is Finish's line, written to w.
func finish(w io.Writer, summary string, dry bool) error {
	line := summary + ", every output matches the CPU reference\n"
	if dry {
		line = summary + " (dry run: nothing computed)\n"
	}
	_, err := io.WriteString(w, line)
	return err
}

// Sizes are the command-line arguments of an example: how many steps it
// runs and how much it scales its base sizes (batch sizes, sequence
// lengths), so that a plan measured on a small run can be tried on a bigger
// one. The defaults are the example's own run.
type Sizes struct {
	Steps int
	Scale float64
}

// MaxSteps is the most steps an example runs: the base sizes repeat every
// few steps, so more shows a plan nothing new, and a mistyped count ran
// without end in sight.
const MaxSteps = 100000

// ParseSizes reads --steps and --scale from the guest's arguments. --help
// prints the usage and ends the guest with exit code 0; a bad flag or an
// argument that is not a flag ends it with exit code 2.
func ParseSizes(name string, defaultSteps int) Sizes {
	args := os.Args
	if len(args) > 0 {
		args = args[1:]
	}
	program = name
	sz, err := Parse(name, defaultSteps, args, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case err != nil:
		os.Exit(2)
	}
	return sz
}

// Parse is ParseSizes on args (without the program's name), writing the
// usage and what was wrong to out: flag.ErrHelp for --help, another error
// for a bad flag, a stray argument or a value out of range.
func Parse(name string, defaultSteps int, args []string, out io.Writer) (Sizes, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	sz := Sizes{}
	fs.IntVar(&sz.Steps, "steps", defaultSteps, fmt.Sprintf("steps to run, cycling through the base sizes, 1 to %d", MaxSteps))
	fs.Float64Var(&sz.Scale, "scale", 1, "factor on the base sizes, in (0, 10000]")
	if err := fs.Parse(args); err != nil {
		return Sizes{}, err // the flag package has printed it and the usage
	}
	var err error
	switch {
	case fs.NArg() > 0:
		// A forgotten "--" or a bare number would otherwise run the
		// default sizes as if asked for.
		err = fmt.Errorf("%s: unexpected argument %q: the arguments are --steps N and --scale K", name, fs.Arg(0))
	case sz.Steps < 1 || sz.Steps > MaxSteps || !(sz.Scale > 0) || sz.Scale > 1e4:
		// A --steps of 10^12 was taken and ran for days, the base
		// sizes cycling all the while.
		err = fmt.Errorf("%s: --steps must be 1 to %d and --scale in (0, 10000], got %d and %g", name, MaxSteps, sz.Steps, sz.Scale)
	}
	if err != nil {
		fmt.Fprintln(out, err)
		return Sizes{}, err
	}
	return sz, nil
}

// Size is step i's size: base sizes in turn, scaled, at least 1.
func (sz Sizes) Size(base []int, i int) int {
	return max(1, int(math.Round(float64(base[i%len(base)])*sz.Scale)))
}

// Largest is the largest size of the steps sz runs.
func (sz Sizes) Largest(base []int) int {
	n := 0
	for i := range min(sz.Steps, len(base)) {
		n = max(n, sz.Size(base, i))
	}
	return n
}
