"""Dequantization throughput: qtrain vs bitsandbytes (CPU backend) in the same run.

Runs build/bench/qtrain_bench_dequant (Google Benchmark, JSON) and times bitsandbytes 0.50 on
the same shapes and threads, then prints a Markdown table for docs/BENCHMARKS.md:

    ~/.cache/qtrain/venv/bin/python bench/dequant.py [--build build] [--shapes 4096x4096,...]

GB/s counts bytes read (codes + scales) plus bytes written (the bf16 output). "new buffer"
allocates the output every call (as bitsandbytes' dequantize_4bit does); "workspace" writes
into a reused buffer (as qtrain's training step does). The limit is a plain copy of the output
bytes into a reused buffer (torch copy_, same threads).
"""

import argparse
import json
import os
import platform
import subprocess
import time

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch
import bitsandbytes as bnb
import bitsandbytes.functional as F

SHAPES = "4096x4096,4096x14336,14336x4096,8192x28672"


def best_seconds(fn, min_time=0.5, min_reps=3):
    fn()
    times, start = [], time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bnb_rates(rows, cols):
    torch.manual_seed(0)
    w = (torch.randn(rows, cols) * 0.02).to(torch.bfloat16)
    out_bytes = w.numel() * 2
    rates = {}
    for name, dq in [("nf4", False), ("nf4_dq", True)]:
        packed, qs = F.quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=dq)
        qbytes = packed.numel() + (qs.absmax.numel() * qs.absmax.element_size())
        if dq:
            qbytes += qs.state2.absmax.numel() * 4 + 256 * 4
        s = best_seconds(lambda: F.dequantize_4bit(packed, qs))
        rates[name] = (qbytes + out_bytes) / s / 1e9
        del packed, qs
    cb, scb, _ = F.int8_vectorwise_quant(w.half())
    # What bitsandbytes' CPU training matmul (MatMul8bitFp) does to the weight every step.
    s = best_seconds(lambda: cb.to(torch.bfloat16).mul_(scb.unsqueeze(1).mul(1.0 / 127.0)))
    rates["int8"] = (cb.numel() + scb.numel() * 4 + out_bytes) / s / 1e9
    out = torch.empty_like(w)
    s = best_seconds(lambda: out.copy_(w))
    rates["copy"] = 2 * out_bytes / s / 1e9
    return rates


def qtrain_rates(binary, rows, cols):
    res = subprocess.run([binary, f"--benchmark_filter=/{rows}/{cols}/", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True)
    rates = {}
    for b in json.loads(res.stdout)["benchmarks"]:
        name = b["name"].split("/")
        key = {"BM_dequant_nf4": name[1], "BM_dequant_nf4_into": name[1] + "_ws", "BM_dequant_int8": "int8",
               "BM_copy": "copy"}[name[0]]
        rates[key] = b["bytes_per_second"] / 1e9
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--shapes", default=SHAPES)
    args = ap.parse_args()
    binary = os.path.join(args.build, "bench", "qtrain_bench_dequant")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch threads {torch.get_num_threads()}, torch CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"bitsandbytes {bnb.__version__}, {time.strftime('%Y-%m-%d')}")
    print()
    print("| shape | format | bnb GB/s (new buffer) | qtrain GB/s (new buffer) | qtrain / bnb | "
          "qtrain GB/s (workspace) | copy GB/s | workspace / copy |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        rows, cols = (int(v) for v in shape.split("x"))
        b = bnb_rates(rows, cols)
        q = qtrain_rates(binary, rows, cols)
        for fmt in ["nf4", "nf4_dq", "int8"]:
            ws = q.get(fmt + "_ws")
            ws_cols = f"{ws:.1f} | {q['copy']:.1f} | {ws / q['copy']:.2f}" if ws else f"- | {q['copy']:.1f} | -"
            print(f"| {rows}x{cols} | {fmt} | {b[fmt]:.2f} | {q[fmt]:.2f} | {q[fmt] / b[fmt]:.2f} | {ws_cols} |",
                  flush=True)


if __name__ == "__main__":
    main()
