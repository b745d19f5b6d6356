package main

import (
	"fmt"
	"math"
	"time"

	"github.com/spf13/pflag"
)

// maxDuration is the longest duration a flag takes, about 292 years: Go's
// durations are int64 nanoseconds.
const maxDuration = time.Duration(math.MaxInt64)

// durationValue is a duration flag whose refusal says what it takes: Go's
// own said only `time: invalid duration "99999999h"`, of a duration past
// maxDuration as of a misspelt one.
type durationValue struct {
	d    *time.Duration
	want string // what the flag takes, "0 (no deadline) or a positive duration"
}

// durationVar defines a duration flag as pflag's DurationVar does, its
// refusal naming want and the range a duration may take.
func durationVar(fs *pflag.FlagSet, d *time.Duration, name string, value time.Duration, want, usage string) {
	*d = value
	fs.Var(&durationValue{d: d, want: want}, name, usage)
}

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%w: want %s such as 90s, 5m or 1h30m, at most %dh (about 292 years)", err, v.want, maxDuration/time.Hour)
	}
	*v.d = d
	return nil
}

// String is the duration as Go writes it, and "0" for none, so that help
// gives no default where there is none, as for pflag's durations.
func (v *durationValue) String() string {
	if v.d == nil || *v.d == 0 {
		return "0"
	}
	return v.d.String()
}

func (v *durationValue) Type() string { return "duration" }
