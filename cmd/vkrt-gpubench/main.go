//go:build cgo

// Command vkrt-gpubench measures vkrt's Vulkan backend on a real GPU, in one
// run: the driver allocation latency through the storage (4 KiB, 64 MiB,
// 1 GiB), device-to-device copy bandwidth through vkrt's compute-shader copy
// next to vkCmdCopyBuffer, and the f32 matrix product, each next to PyTorch
// on the same GPU when python3 with torch is there.
//
//	vkrt-gpubench [--device N] [--copy-bytes B] [--matmul N] [--torch-script PATH]
//
// Bandwidths count bytes read plus bytes written, as PyTorch's figures do.
// Times are wall-clock over one submission of many repetitions (after
// warm-up), best of several trials.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
	"github.com/vkrt/vkrt/vk"
)

func main() {
	device := flag.Int("device", 0, "Vulkan device index (vkrt devices lists them)")
	copyBytes := flag.Uint64("copy-bytes", 1<<30, "bytes per copy (source and destination each)")
	copyReps := flag.Int("copy-reps", 20, "copies per timed submission")
	matmulN := flag.Uint("matmul", 4096, "matrix size N of the N x N x N f32 product")
	matmulReps := flag.Int("matmul-reps", 10, "matrix products per timed submission")
	trials := flag.Int("trials", 5, "timed submissions per figure; the best counts")
	torchScript := flag.String("torch-script", "cmd/vkrt-gpubench/torch_ref.py", "PyTorch reference script; empty to skip")
	validation := flag.Bool("validation", false, "run under the Khronos validation layer")
	flag.Parse()
	if err := checkFlags(*copyBytes, *copyReps, *matmulN, *matmulReps, *trials); err != nil {
		fmt.Fprintln(os.Stderr, "vkrt-gpubench:", err)
		os.Exit(2)
	}
	if err := run(*device, *copyBytes, *copyReps, uint32(*matmulN), *matmulReps, *trials, *torchScript, *validation); err != nil {
		fmt.Fprintln(os.Stderr, "vkrt-gpubench:", err)
		os.Exit(1)
	}
}

// checkFlags refuses figures the measurements cannot take: no repetition or
// trial to time, a copy of no whole 16-byte word, or a matrix of no element
// or of more elements than a push constant counts.
func checkFlags(copyBytes uint64, copyReps int, matmulN uint, matmulReps, trials int) error {
	switch {
	case copyReps < 1:
		return fmt.Errorf("-copy-reps %d: at least one copy is timed", copyReps)
	case matmulReps < 1:
		return fmt.Errorf("-matmul-reps %d: at least one product is timed", matmulReps)
	case trials < 1:
		return fmt.Errorf("-trials %d: at least one trial is timed", trials)
	case copyBytes < 16 || copyBytes/4 > math.MaxUint32:
		return fmt.Errorf("-copy-bytes %d: from 16 B to %d B (the copy kernel counts 32-bit words)", copyBytes, uint64(math.MaxUint32)*4)
	case matmulN < 1 || matmulN > math.MaxUint16:
		return fmt.Errorf("-matmul %d: from 1 to %d (the kernels count the N x N elements in 32 bits)", matmulN, math.MaxUint16)
	}
	return nil
}

type results struct {
	Device        string             `json:"device"`
	Driver        string             `json:"driver"`
	AllocMedianUs map[string]float64 `json:"alloc_median_us"`
	FreeMedianUs  map[string]float64 `json:"free_median_us"`
	CopyKernelGBs float64            `json:"copy_kernel_gbs"`
	CopyBufferGBs float64            `json:"copy_buffer_gbs"`
	MatmulGFlops  float64            `json:"matmul_f32_gflops"`
	Torch         *torchFigures      `json:"torch,omitempty"`
}

type torchFigures struct {
	Version      string  `json:"torch"`
	GPU          string  `json:"gpu"`
	CopyGBs      float64 `json:"copy_gbs"`
	MatmulGFlops float64 `json:"matmul_f32_gflops"`
	AllowTF32    bool    `json:"allow_tf32"`
}

func run(index int, copyBytes uint64, copyReps int, n uint32, mmReps, trials int, torchScript string, validation bool) error {
	d, err := vk.Open(index, vk.WithValidation(validation))
	if err != nil {
		return err
	}
	defer func() {
		if err := d.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "vkrt-gpubench: close:", err)
		}
	}()
	info := d.Info()
	res := results{Device: info.Name, Driver: strings.TrimSpace(info.DriverName + " " + info.DriverVersion)}
	fmt.Printf("device %d: %s (%s), driver %s %s, Vulkan %s\n", info.Index, info.Name, info.Type, info.DriverName, info.DriverVersion, info.APIVersion)
	p := d.Properties()
	fmt.Printf("storage heap %.1f GiB, alignment %d B, max page %d B, host-visible storage: %v\n",
		float64(p.MemorySize)/(1<<30), p.Alignment, p.MaxPageSize, d.HostVisible())
	if budget, usage, ok := d.Budget(); ok {
		fmt.Printf("memory budget %.1f GiB, in use %.2f GiB\n", float64(budget)/(1<<30), float64(usage)/(1<<30))
	}

	res.AllocMedianUs, res.FreeMedianUs = map[string]float64{}, map[string]float64{}
	fmt.Println("\nallocation latency (Storage.Alloc: vkCreateBuffer + vkAllocateMemory + vkBindBufferMemory; free: Dealloc + Flush)")
	for _, a := range []struct {
		name string
		size uint64
		reps int
	}{{"4KiB", 4 << 10, 50}, {"64MiB", 64 << 20, 20}, {"1GiB", 1 << 30, 10}} {
		alloc, free, err := allocLatency(d, a.size, a.reps)
		if err != nil {
			return err
		}
		res.AllocMedianUs[a.name], res.FreeMedianUs[a.name] = us(median(alloc)), us(median(free))
		fmt.Printf("  %-6s alloc median %9.1f µs (min %9.1f), free median %9.1f µs  [%d reps]\n",
			a.name, us(median(alloc)), us(slices.Min(alloc)), us(median(free)), a.reps)
	}

	if err := measureCopies(d, copyBytes, copyReps, trials, &res); err != nil {
		return err
	}
	if err := measureMatMul(d, n, mmReps, trials, &res); err != nil {
		return err
	}

	if torchScript != "" {
		tf, err := runTorch(torchScript, copyBytes, copyReps, n, mmReps)
		if err != nil {
			fmt.Printf("\nPyTorch: not measured (%v); SPEC quotes 4.2 TB/s for copy_ on the H200\n", err)
		} else {
			res.Torch = tf
			fmt.Printf("\nPyTorch %s on %s\n", tf.Version, tf.GPU)
			fmt.Printf("  copy_        %8.1f GB/s   vkrt copy kernel / PyTorch = %.3f\n", tf.CopyGBs, res.CopyKernelGBs/tf.CopyGBs)
			fmt.Printf("  f32 matmul   %8.1f GFLOP/s (TF32 %v)   vkrt / PyTorch = %.3f\n", tf.MatmulGFlops, tf.AllowTF32, res.MatmulGFlops/tf.MatmulGFlops)
		}
	}
	line, _ := json.Marshal(res)
	fmt.Printf("\n%s\n", line)
	return nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func allocLatency(d *vk.Device, size uint64, reps int) (alloc, free []time.Duration, err error) {
	s := d.Storage()
	for range reps {
		t0 := time.Now()
		h, err := s.Alloc(size)
		if err != nil {
			return nil, nil, err
		}
		alloc = append(alloc, time.Since(t0))
		t0 = time.Now()
		s.Dealloc(h.ID)
		s.Flush()
		free = append(free, time.Since(t0))
	}
	return alloc, free, nil
}

// best runs f trials times and returns the shortest time.
func best(trials int, f func() error) (time.Duration, error) {
	bestT := time.Duration(math.MaxInt64)
	for range trials {
		t0 := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		bestT = min(bestT, time.Since(t0))
	}
	return bestT, nil
}

func word(d *vk.Device, h vkruntime.StorageHandle, index uint64) (uint32, error) {
	b := make([]byte, 4)
	err := d.Download(context.Background(), vkruntime.StorageHandle{ID: h.ID, Offset: h.Offset + 4*index, Size: 4}, b)
	return binary.LittleEndian.Uint32(b), err
}

func measureCopies(d *vk.Device, size uint64, reps, trials int, res *results) error {
	s := d.Storage()
	size = size / 16 * 16
	src, err := s.Alloc(size)
	if err != nil {
		return err
	}
	dst, err := s.Alloc(size)
	if err != nil {
		return err
	}
	defer func() { s.Dealloc(src.ID); s.Dealloc(dst.ID); s.Flush() }()
	words := uint32(size / 4)
	if err := d.Dispatch(context.Background(), []kernel.Op{kernel.FillWords(words, 0x5eed1234).With(src), kernel.FillWords(words, 0).With(dst)}); err != nil {
		return err
	}
	copyOp := kernel.CopyWords(words).With(src, dst)
	if err := d.Dispatch(context.Background(), []kernel.Op{copyOp}); err != nil {
		return err
	}
	for _, i := range []uint64{0, uint64(words) / 2, uint64(words) - 1} {
		w, err := word(d, dst, i)
		if err != nil {
			return err
		}
		if w != 0x5eed1234 {
			return fmt.Errorf("copy kernel check: word %d is %#x, want 0x5eed1234", i, w)
		}
	}
	kernelOps := make([]kernel.Op, reps)
	bufferOps := make([]vk.CopyPair, reps)
	for i := range kernelOps {
		kernelOps[i] = copyOp
		bufferOps[i] = vk.CopyPair{Dst: dst, Src: src}
	}
	_ = d.Dispatch(context.Background(), kernelOps[:min(3, reps)])
	_ = d.CopyBatch(context.Background(), bufferOps[:min(3, reps)])
	tk, err := best(trials, func() error { return d.Dispatch(context.Background(), kernelOps) })
	if err != nil {
		return err
	}
	tb, err := best(trials, func() error { return d.CopyBatch(context.Background(), bufferOps) })
	if err != nil {
		return err
	}
	moved := float64(2 * size * uint64(reps))
	res.CopyKernelGBs, res.CopyBufferGBs = moved/tk.Seconds()/1e9, moved/tb.Seconds()/1e9
	fmt.Printf("\ndevice-to-device copy, %.0f MiB each way, %d per submission, best of %d (read + written bytes)\n", float64(size)/(1<<20), reps, trials)
	fmt.Printf("  vkrt copy kernel (uvec4)  %8.1f GB/s  (%.3f ms per copy, grid %v)\n", res.CopyKernelGBs, tk.Seconds()*1e3/float64(reps), copyOp.Grid)
	// The kernel loops with the grid's stride, so other grids are correct
	// too: the full grid moves one uvec4 per invocation, smaller ones several.
	for _, groups := range []uint64{(uint64(words)/4 + 255) / 256, 8192, 16384, 32768, 65536, 131072} {
		op := copyOp
		op.Grid = kernel.RowGrid(groups)
		ops := make([]kernel.Op, reps)
		for i := range ops {
			ops[i] = op
		}
		t, err := best(trials, func() error { return d.Dispatch(context.Background(), ops) })
		if err != nil {
			return err
		}
		fmt.Printf("    with %6d work groups  %8.1f GB/s\n", groups, moved/t.Seconds()/1e9)
	}
	fmt.Printf("  vkCmdCopyBuffer           %8.1f GB/s  (%.3f ms per copy)\n", res.CopyBufferGBs, tb.Seconds()*1e3/float64(reps))
	return nil
}

func measureMatMul(d *vk.Device, n uint32, reps, trials int, res *results) error {
	s := d.Storage()
	bytes := uint64(n) * uint64(n) * 4
	var hs []vkruntime.StorageHandle
	for range 3 {
		h, err := s.Alloc(bytes)
		if err != nil {
			return err
		}
		hs = append(hs, h)
	}
	defer func() {
		for _, h := range hs {
			s.Dealloc(h.ID)
		}
		s.Flush()
	}()
	a, b, c := hs[0], hs[1], hs[2]
	words := n * n
	if err := d.Dispatch(context.Background(), []kernel.Op{
		kernel.FillWords(words, math.Float32bits(1)).With(a),
		kernel.FillWords(words, math.Float32bits(0.5)).With(b),
	}); err != nil {
		return err
	}
	op := kernel.MatMul(n, n, n).With(a, b, c)
	if err := d.Dispatch(context.Background(), []kernel.Op{op}); err != nil {
		return err
	}
	for _, i := range []uint64{0, uint64(words) - 1} {
		w, err := word(d, c, i)
		if err != nil {
			return err
		}
		if got, want := math.Float32frombits(w), float32(n)/2; got != want {
			return fmt.Errorf("matmul check: element %d is %g, want %g", i, got, want)
		}
	}
	ops := make([]kernel.Op, reps)
	for i := range ops {
		ops[i] = op
	}
	t, err := best(trials, func() error { return d.Dispatch(context.Background(), ops) })
	if err != nil {
		return err
	}
	res.MatmulGFlops = 2 * math.Pow(float64(n), 3) * float64(reps) / t.Seconds() / 1e9
	fmt.Printf("\nf32 matmul %d x %d x %d, %d per submission, best of %d\n", n, n, n, reps, trials)
	fmt.Printf("  vkrt matmul kernel        %8.1f GFLOP/s  (%.3f ms per product)\n", res.MatmulGFlops, t.Seconds()*1e3/float64(reps))
	return nil
}

func runTorch(script string, copyBytes uint64, copyReps int, n uint32, mmReps int) (*torchFigures, error) {
	if _, err := os.Stat(script); err != nil {
		return nil, err
	}
	cmd := exec.Command("python3", script, fmt.Sprint(copyBytes), fmt.Sprint(copyReps), fmt.Sprint(n), fmt.Sprint(mmReps))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("python3 %s: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var tf torchFigures
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &tf); err != nil {
		return nil, fmt.Errorf("reading %q: %w", lines[len(lines)-1], err)
	}
	if tf.CopyGBs <= 0 || tf.MatmulGFlops <= 0 {
		return nil, errors.New("PyTorch reported no figures")
	}
	return &tf, nil
}
