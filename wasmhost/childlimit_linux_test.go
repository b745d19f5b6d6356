package wasmhost

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// hostileChildEnv marks the child process runLimitedChild starts.
const hostileChildEnv = "VKRT_WASMHOST_LIMITED_CHILD"

// runLimitedChild runs the tests matching pattern in a child process of the
// test binary, which limits its own address space (limitAddressSpace), and
// fails if the child does.
func runLimitedChild(t *testing.T, pattern string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+pattern, "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), hostileChildEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if strings.Contains(out.String(), "--- SKIP") && !strings.Contains(out.String(), "--- FAIL") && err == nil {
		t.Skipf("the child skipped:\n%s", out.String())
	}
	if err != nil {
		t.Fatalf("the child process failed: %v\n%s", err, ends(out.String(), 4000))
	}
}

// ends is the first and last n bytes of s.
func ends(s string, n int) string {
	if len(s) > 2*n {
		return s[:n] + "\n…\n" + s[len(s)-n:]
	}
	return s
}

// limitAddressSpace limits the process's address space to what it maps
// now and extra bytes more, so that an allocation past that ends it with
// a fatal out-of-memory error instead of taking the machine's memory.
func limitAddressSpace(t testing.TB, extra uint64) {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var vm uint64
	for s := bufio.NewScanner(f); s.Scan(); {
		if kb, ok := strings.CutPrefix(s.Text(), "VmSize:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			vm = n << 10
		}
	}
	if vm == 0 {
		t.Fatal("no VmSize in /proc/self/status")
	}
	lim := syscall.Rlimit{Cur: vm + extra, Max: vm + extra}
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &lim); err != nil {
		t.Fatal(err)
	}
}

var limitOnce sync.Once

// limitAddressSpaceOnce is limitAddressSpace, once a process.
func limitAddressSpaceOnce(t testing.TB, extra uint64) {
	limitOnce.Do(func() { limitAddressSpace(t, extra) })
}
