"""Optimizer step time and state memory: qtrain's AdamW and AdamW8bit against torch's AdamW and
bitsandbytes' AdamW8bit (its CPU backend), on the same LoRA-shaped parameters and threads in the
same run. Prints a Markdown table for docs/BENCHMARKS.md:

    ~/.cache/qtrain/venv/bin/python bench/optimizer_step.py [--build build] [--tensors 64 --rows 16 --cols 4096]

Step time is the best of --steps steps (fresh gradients each step, outside the timing; the first
step is a warm-up). State bytes are the optimizer's state tensors: qtrain's state_nbytes(); for
torch and bitsandbytes the tensors in optimizer.state (qmaps counted once).
"""

import argparse
import json
import os
import subprocess
import time

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch
import bitsandbytes as bnb


def reference(kind, tensors, rows, cols, steps):
    torch.manual_seed(0)
    params = [torch.randn(rows, cols).requires_grad_(True) for _ in range(tensors)]
    if kind == "torch":
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, foreach=False, fused=False)
    else:
        opt = bnb.optim.AdamW8bit(params, lr=1e-4, weight_decay=0.01)
    best = float("inf")
    for s in range(steps + 1):
        for p in params:
            p.grad = torch.randn(rows, cols) * 0.01
        t0 = time.perf_counter()
        opt.step()
        dt = time.perf_counter() - t0
        if s > 0:
            best = min(best, dt)
    seen, state_bytes = set(), 0
    for st in opt.state.values():
        for v in st.values():
            if torch.is_tensor(v) and v.data_ptr() not in seen:
                seen.add(v.data_ptr())
                state_bytes += v.numel() * v.element_size()
            elif isinstance(v, int):
                state_bytes += 8  # the step count, as qtrain stores it (int64)
    return best, state_bytes


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--tensors", type=int, default=64)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = subprocess.run(
        [
            os.path.join(args.build, "bench", "qtrain_bench_optimizer"),
            *("--tensors", str(args.tensors), "--rows", str(args.rows), "--cols", str(args.cols)),
            *("--steps", str(args.steps), "--threads", str(args.threads)),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    ours = {j["optimizer"]: j for j in map(json.loads, out.splitlines())}
    rows = [
        ("AdamW 32-bit", "adamw_torch", "torch.optim.AdamW", reference("torch", args.tensors, args.rows, args.cols, args.steps)),
        ("AdamW 8-bit", "adamw_bnb_8bit", "bnb.optim.AdamW8bit", reference("bnb", args.tensors, args.rows, args.cols, args.steps)),
    ]
    n = args.tensors * args.rows * args.cols
    print(f"{args.tensors} tensors [{args.rows}, {args.cols}] ({n / 1e6:.1f} M parameters), {args.threads} threads\n")
    print("| optimizer | reference | reference step ms | qtrain step ms | qtrain / reference time | reference state MiB | qtrain state MiB | qtrain state bytes / parameter |")
    print("|---|---|---|---|---|---|---|---|")
    for label, name, ref_name, (ref_s, ref_bytes) in rows:
        q = ours[name]
        print(
            f"| {label} (`{name}`) | {ref_name} | {ref_s * 1e3:.1f} | {q['step_seconds'] * 1e3:.1f} | "
            f"{q['step_seconds'] / ref_s:.2f} | {ref_bytes / 2**20:.1f} | {q['state_bytes'] / 2**20:.1f} | "
            f"{q['state_bytes'] / n:.3f} |"
        )
    eight, full = ours["adamw_bnb_8bit"], ours["adamw_torch"]
    print(
        f"\nqtrain 8-bit / 32-bit: step time {eight['step_seconds'] / full['step_seconds']:.2f}x, "
        f"state {eight['state_bytes'] / full['state_bytes']:.3f}x"
    )


if __name__ == "__main__":
    main()
