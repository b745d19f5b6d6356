package main

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
)

// The runtime's packages warn on slog.Default where the command gives them
// no logger of their own (the layout a replay or a run installs past the
// device, a plan a run outgrows): the command makes that logger its own, so
// that a warning reads as its other lines do, on its stderr ("vkrt:
// warning: memory: the layout asks for more than the device has
// (layout=Virtual detail="…")"), not as Go's default log line with a
// date before it. What the log package writes goes the same way.
func init() {
	slog.SetDefault(slog.New(&commandLog{mu: new(sync.Mutex), w: func() io.Writer { return rootCmd.ErrOrStderr() }}))
}

// commandLog is a slog.Handler writing a record as one line of the
// command's: "vkrt: warning: " (or "vkrt: error: ", or "vkrt: " for what
// only informs) before the message, then its attributes as key=value, a
// value quoted where it holds a space, a quote, an equals sign, a
// parenthesis or what a terminal would act on. Debug records are dropped, as slog's default
// handler drops them.
type commandLog struct {
	mu     *sync.Mutex
	w      func() io.Writer
	attrs  []string // already formatted, groups included
	prefix string   // the open groups, "a.b."
}

func (h *commandLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *commandLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("vkrt: ")
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("warning: ")
	}
	b.WriteString(shownOnTerminal(strings.TrimPrefix(r.Message, "vkrt: ")))
	attrs := h.attrs
	r.Attrs(func(a slog.Attr) bool {
		attrs = appendAttr(attrs, h.prefix, a)
		return true
	})
	if len(attrs) > 0 {
		b.WriteString(" (" + strings.Join(attrs, " ") + ")")
	}
	b.WriteString("\n")
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w(), b.String())
	return err
}

func (h *commandLog) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = slices.Clip(h.attrs)
	for _, a := range as {
		c.attrs = appendAttr(c.attrs, h.prefix, a)
	}
	return &c
}

func (h *commandLog) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.attrs = slices.Clip(h.attrs)
	c.prefix += name + "."
	return &c
}

// appendAttr appends a, resolved, as key=value (a group's attributes each
// with the group's name before their keys); an empty attribute is none.
func appendAttr(out []string, prefix string, a slog.Attr) []string {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return out
	}
	if a.Value.Kind() == slog.KindGroup {
		if a.Key != "" {
			prefix += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			out = appendAttr(out, prefix, g)
		}
		return out
	}
	return append(out, quotedIfNeeded(prefix+a.Key)+"="+quotedIfNeeded(a.Value.String()))
}

// quotedIfNeeded is s, or s quoted as Go quotes it where it is empty or
// holds a space, a quote, an equals sign, a parenthesis or a rune that is
// not printable.
func quotedIfNeeded(s string) string {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool {
		return r == ' ' || r == '"' || r == '=' || r == '(' || r == ')' || !unicode.IsPrint(r)
	}) {
		return strconv.Quote(s)
	}
	return s
}
