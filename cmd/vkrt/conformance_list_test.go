package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/device/cpu"
)

// --list with --json asked for a report file: either the file is written
// (the list) or the command refuses the combination; it must not exit 0
// having silently written nothing where a CI step expects a file.
func TestConformanceListRefusesReportFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checks.json")
	var stdout, stderr bytes.Buffer
	err := runConformance(context.Background(), &stdout, &stderr, conformance.OnDevice(cpu.Open),
		conformanceFlags{list: true, json: path, timeout: time.Minute})
	_, statErr := os.Stat(path)
	if err == nil && statErr != nil {
		t.Fatalf("--list --json %s: exit 0, %d B of list on stdout, and no %s (%v)", path, stdout.Len(), filepath.Base(path), statErr)
	}
}
