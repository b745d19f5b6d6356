"""PyTorch reference figures for vkrt-gpubench on the same GPU: the
bandwidth of a device-to-device tensor copy_ (bytes read + written) and the
f32 matrix product with TF32 off. Prints one JSON object."""
import json
import sys

import torch


def timed(fn, reps, trials=5):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(trials):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return best


def main():
    copy_bytes, copy_reps, n, mm_reps = (int(a) for a in sys.argv[1:5])
    dev = torch.device("cuda")
    src = torch.ones(copy_bytes // 4, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    t = timed(lambda: dst.copy_(src), copy_reps)
    copy_gbs = 2 * copy_bytes * copy_reps / t / 1e9
    del src, dst

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    a = torch.randn(n, n, dtype=torch.float32, device=dev)
    b = torch.randn(n, n, dtype=torch.float32, device=dev)
    c = torch.empty(n, n, dtype=torch.float32, device=dev)
    for _ in range(3):
        torch.mm(a, b, out=c)
    t = timed(lambda: torch.mm(a, b, out=c), mm_reps)
    gflops = 2 * n**3 * mm_reps / t / 1e9
    print(json.dumps({
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0),
        "copy_gbs": copy_gbs,
        "matmul_f32_gflops": gflops,
        "allow_tf32": torch.backends.cuda.matmul.allow_tf32,
    }))


if __name__ == "__main__":
    main()
