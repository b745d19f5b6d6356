package memory

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnknownMapping: Reserve was given a Mapping other than Eager and
// Lazy. Nothing was reserved.
var ErrUnknownMapping = errors.New("memory: unknown mapping")

// InstallErrorKind says why a layout was not installed.
type InstallErrorKind int

const (
	// PoolsInUse: the dynamic pools still hold live allocations, so the
	// previous layout was kept. Transient: retry once they drain.
	PoolsInUse InstallErrorKind = iota + 1
	// StreamUnavailable: the calling stream is in an error state.
	StreamUnavailable
	// Unsupported: the backend has no configurable pools. Permanent.
	Unsupported
	// InvalidLayout: the layout cannot be honoured. Permanent. A layout
	// that cannot be read (ParseLayout, ReadLayout, ReadLayoutFile and
	// Layout.UnmarshalJSON refusing malformed JSON, an unknown preset or
	// variant, a byte order mark, an empty or oversized file) is one too:
	// its error matches InvalidLayout under errors.Is and errors.As
	// gives an *InstallError of this kind, while a file that cannot be
	// opened or read keeps its own error and matches no kind.
	InvalidLayout
)

func (k InstallErrorKind) String() string {
	switch k {
	case PoolsInUse:
		return "PoolsInUse"
	case StreamUnavailable:
		return "StreamUnavailable"
	case Unsupported:
		return "Unsupported"
	case InvalidLayout:
		return "InvalidLayout"
	}
	return fmt.Sprintf("InstallErrorKind(%d)", int(k))
}

// InstallError is why Install (or NewManager) did not take a layout.
// BytesInUse and AllocsInUse are set for PoolsInUse (the live
// reservations, which may be of 0 B), Reason for InvalidLayout.
type InstallError struct {
	Kind        InstallErrorKind
	BytesInUse  uint64
	AllocsInUse uint64
	Reason      string
}

func (e *InstallError) Error() string {
	switch e.Kind {
	case PoolsInUse:
		switch e.AllocsInUse {
		case 0: // made by hand, without the count
			return fmt.Sprintf("%d B still live in the pools", e.BytesInUse)
		case 1:
			return fmt.Sprintf("%d B still live in the pools, in 1 reservation", e.BytesInUse)
		}
		return fmt.Sprintf("%d B still live in the pools, in %d reservations", e.BytesInUse, e.AllocsInUse)
	case StreamUnavailable:
		return "the calling stream is in an error state"
	case Unsupported:
		return "this backend has no configurable memory pools"
	case InvalidLayout:
		return "the pool layout cannot be honoured: " + e.Reason
	}
	return fmt.Sprintf("install error of unknown kind %d", int(e.Kind))
}

// Transient reports whether retrying the same install later can succeed:
// only PoolsInUse is.
func (e *InstallError) Transient() bool { return e.Kind == PoolsInUse }

// Is lets errors.Is match an *InstallError by kind: errors.Is(err,
// &InstallError{Kind: PoolsInUse}). A nil *InstallError names no kind and
// matches none.
func (e *InstallError) Is(target error) bool {
	var t *InstallError
	// errors.As gives a typed nil target as it is: reading its kind
	// panicked inside errors.Is.
	return errors.As(target, &t) && t != nil && t.Kind == e.Kind
}

func invalidLayout(format string, args ...any) *InstallError {
	return &InstallError{Kind: InvalidLayout, Reason: fmt.Sprintf(format, args...)}
}

// unreadableLayout is the error of a layout that cannot be read: it says
// what the reader said, and classifies as InvalidLayout.
type unreadableLayout struct{ err error }

// layoutUnreadable classifies err, a refusal of a layout's text, as
// InvalidLayout; nil stays nil.
func layoutUnreadable(err error) error {
	if err == nil {
		return nil
	}
	var u *unreadableLayout
	if errors.As(err, &u) {
		return err
	}
	return &unreadableLayout{err: err}
}

func (e *unreadableLayout) Error() string { return e.err.Error() }
func (e *unreadableLayout) Unwrap() error { return e.err }

// Is matches an *InstallError of kind InvalidLayout.
func (e *unreadableLayout) Is(target error) bool {
	var t *InstallError
	return errors.As(target, &t) && t != nil && t.Kind == InvalidLayout
}

// As gives an *InstallError target the InvalidLayout it is, its reason
// the reader's message.
func (e *unreadableLayout) As(target any) bool {
	t, ok := target.(**InstallError)
	if ok {
		*t = &InstallError{Kind: InvalidLayout, Reason: strings.TrimPrefix(e.err.Error(), "memory: ")}
	}
	return ok
}
