// Package wasmtest builds the WebAssembly guests tests run: Go packages
// compiled for wasip1 and WebAssembly text assembled with wabt's wat2wasm
// (Debian package wabt, which ci/install.sh installs). Each is built once
// per test binary. It is test support only.
package wasmtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	dirOnce sync.Once
	dir     string
	dirErr  error
	built   sync.Map // key -> *result
)

type result struct {
	once sync.Once
	wasm []byte
	err  error
}

// scratch is a directory the builds of this test binary share; it lives
// until the process ends, under the system's temporary directory.
func scratch() (string, error) {
	dirOnce.Do(func() { dir, dirErr = os.MkdirTemp("", "vkrt-wasmtest-") })
	return dir, dirErr
}

func once(key string, build func(dir string) ([]byte, error)) ([]byte, error) {
	v, _ := built.LoadOrStore(key, &result{})
	r := v.(*result)
	r.once.Do(func() {
		d, err := scratch()
		if err != nil {
			r.err = err
			return
		}
		r.wasm, r.err = build(d)
	})
	return r.wasm, r.err
}

// moduleRoot is the directory holding go.mod, from the test's directory up.
func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod above the test's directory")
		}
		d = parent
	}
}

// PrebuiltEnv names a directory of guests built beforehand, for a test
// binary run where there is no Go toolchain: the guest of "examples/mlp" is
// examples_mlp.wasm there.
const PrebuiltEnv = "VKRT_PREBUILT_GUESTS"

// Go builds the package pkg (a path from the module root, like
// "examples/mlp") with GOOS=wasip1 GOARCH=wasm, or reads it from
// $VKRT_PREBUILT_GUESTS.
func Go(t testing.TB, pkg string) []byte {
	t.Helper()
	wasm, err := once("go:"+pkg, func(d string) ([]byte, error) {
		if dir := os.Getenv(PrebuiltEnv); dir != "" {
			return os.ReadFile(filepath.Join(dir, strings.ReplaceAll(pkg, "/", "_")+".wasm"))
		}
		root, err := moduleRoot()
		if err != nil {
			return nil, err
		}
		out := filepath.Join(d, strings.ReplaceAll(pkg, "/", "_")+".wasm")
		cmd := exec.Command("go", "build", "-o", out, "./"+pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s for wasip1: %v\n%s", pkg, err, msg)
		}
		return os.ReadFile(out)
	})
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

// GoFile is Go's guest written to a file of its own under the test's
// temporary directory, named name.
func GoFile(t testing.TB, pkg, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, Go(t, pkg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// WAT assembles WebAssembly text. Without wat2wasm the test is skipped,
// unless VKRT_REQUIRE_DEVICE=1 (as in CI) makes that a failure.
func WAT(t testing.TB, src string) []byte {
	t.Helper()
	tool, err := exec.LookPath("wat2wasm")
	if err != nil {
		if os.Getenv("VKRT_REQUIRE_DEVICE") == "1" {
			t.Fatalf("wat2wasm (Debian package wabt; ci/install.sh installs it) is missing: %v", err)
		}
		t.Skipf("wat2wasm (Debian package wabt) is missing: %v", err)
	}
	wasm, err := once("wat:"+src, func(string) ([]byte, error) {
		d, err := os.MkdirTemp("", "vkrt-wat-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		in, out := filepath.Join(d, "guest.wat"), filepath.Join(d, "guest.wasm")
		if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
			return nil, err
		}
		if msg, err := exec.Command(tool, "--enable-all", in, "-o", out).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("wat2wasm: %v\n%s\n%s", err, msg, src)
		}
		return os.ReadFile(out)
	})
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}
