package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/memory"
)

// secondRun is a trace's second run: its dry replay, it under the first
// run's plan, the first run under its plan, and what PyTorch with
// expandable segments did on it as the directory's README records.
type secondRun struct {
	dry, underFirst, firstUnder *replay.Result
	pytorch                     string
}

var secondRunHead = []string{"second run: peak live", "under the first run's plan", "PyTorch expandable", "first run under its plan"}

// secondRunPath is the second run in dir of the trace read from first,
// NAME.trace.gz or NAME.trace, or "" where there is none. NAME is the
// first run's file name less its suffixes, as it is on disk (the trace's
// name shows some characters escaped). A link counts as there even when
// what it names is not, so reading it fails naming it: a broken link was
// taken for no second run. A directory that holds both is an error: which
// is the second run is not for the command to guess (NAME.trace.gz was
// taken, and NAME.trace left unsaid).
func secondRunPath(dir, first string) (string, error) {
	name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(first), ".gz"), ".trace")
	var found []string
	for _, file := range []string{name + ".trace.gz", name + ".trace"} {
		path := filepath.Join(dir, file)
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			found = append(found, path)
		}
	}
	switch len(found) {
	case 0:
		return "", nil
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("--second-runs %s holds both %s and %s as the second run of %s: keep one, remove or rename the other", dir, found[0], found[1], first)
}

// replaySecondRun reads path, the second run in dir of first (read from
// firstPath), and runs each under the other's plan.
func replaySecondRun(first *trace.Trace, firstPath, path string, firstPlan, layout memory.Layout, dir string) (*secondRun, error) {
	tr, err := trace.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := &secondRun{pytorch: recordedPyTorch(filepath.Join(dir, "README.md"), trace.NameOf(firstPath))}
	// The second run goes by the first's name, so its errors name its
	// file: a line they blame is the second run's, not the first's.
	if s.dry, err = replay.Run(tr, layout, replay.Options{}); err != nil {
		return nil, fmt.Errorf("the second run of %s, %s: %w", first.Name, path, err)
	}
	secondPlan, err := plan.Derive(s.dry.Report, plan.Options{Strength: plan.Strong, Trace: tr})
	if err != nil {
		return nil, fmt.Errorf("planning the second run of %s, %s: %w", first.Name, path, err)
	}
	if s.underFirst, err = replay.Run(tr, firstPlan, replay.Options{}); err != nil {
		return nil, fmt.Errorf("the second run of %s, %s, under the first run's plan: %w", first.Name, path, err)
	}
	if s.firstUnder, err = replay.Run(first, secondPlan, replay.Options{}); err != nil {
		return nil, fmt.Errorf("%s under its second run's plan: %w", first.Name, err)
	}
	return s, nil
}

func (s *secondRun) cells() []string {
	if s == nil {
		return []string{"—", "—", "—", "—"}
	}
	return []string{memory.FormatBytes(s.dry.PeakLiveBytes), fmt.Sprintf("%.4f× (%d)", s.underFirst.Ratio(), s.underFirst.DriverAllocs),
		s.pytorch, fmt.Sprintf("%.4f× (%d)", s.firstUnder.Ratio(), s.firstUnder.DriverAllocs)}
}

// recordedPyTorch is the "PyTorch expandable segments" cell of name's row
// in the Markdown table of readme, or "?" when it records none or is no
// regular file.
func recordedPyTorch(readme, name string) string {
	// Only a file: opening a FIFO of that name waited for a writer, and
	// the replay hung after the second run (a device never ended).
	if fi, err := os.Stat(readme); err != nil || !fi.Mode().IsRegular() {
		return "?"
	}
	f, err := os.Open(readme)
	if err != nil {
		return "?"
	}
	defer f.Close()
	column := -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			// A table ends: the next one has columns of its own.
			column = -1
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		for i, c := range cells {
			if c == "PyTorch expandable segments" {
				column = i
			}
		}
		if column >= 0 && column < len(cells) && cells[0] == name {
			return cells[column]
		}
	}
	return "?"
}
