"""Training with k of the model's layers streamed from pinned host memory: step time against the
transfer bound and the compute time, for k = 0, 8, 16 and all layers.

    python bench/offload_sweep.py --build build [--preset llama3-8b]
        [--seq 2048] [--steps 10] [--depth 1] [--device cuda]

Same model and settings as gpu_train_step.py (QLoRA NF4+DQ r=16 all-linear, seq 2048, bf16,
checkpointing on). For each k, `qtrain train` runs with `offload_layers: k` and prints the pinned
host-to-device bandwidth it measured; the step time is the median over the steps after the first
3 (tokens per step / tokens_per_second). compute = the k=0 step time; transfer = the bytes copied
per step (metrics.jsonl offload_bytes_per_step) / the measured bandwidth; the bound is
max(compute, transfer), and the target (issue 5) is a step time within 10% of it.
`--preset tiny --device cpu --ks 0,1,2 --steps 4` checks the script without a GPU (the CPU
simulated copy engine; numbers meaningless there).
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qtrain_bench  # noqa: E402


def main():
    ap = qtrain_bench.arg_parser(__doc__, steps=10)
    ap.add_argument("--depth", type=int, default=1)
    ap.add_argument("--ks", default="0,8,16,all")
    a = ap.parse_args()
    qtrain, model, config, work, data = qtrain_bench.setup(a, "offload_sweep")
    n = config["num_hidden_layers"]

    results = []
    for k_text in a.ks.split(","):
        k = n if k_text == "all" else int(k_text)
        print(f"[bench] offload_layers {k} ...", flush=True)
        rows, out = qtrain_bench.run_qtrain(
            qtrain, os.path.join(work, f"k{k}"), model, data, a.seq, a.steps, a.device,
            {"offload_layers": k, "offload_prefetch_depth": a.depth})
        step_s = qtrain_bench.steady([a.seq / r["tokens_per_second"] for r in rows], 3)
        moved = qtrain_bench.steady([r.get("offload_bytes_per_step", 0) for r in rows], 3)
        m = re.search(r"copies at ([0-9.]+) GB/s", out)
        bw = float(m.group(1)) * 1e9 if m else float("nan")
        peak = max(r["peak_memory_bytes"] for r in rows)
        results.append((k, step_s, moved, bw, peak))

    compute = next((s for k, s, *_ in results if k == 0), float("nan"))
    print(f"\n{a.preset} ({n} layers), seq {a.seq}, prefetch depth {a.depth}, {a.device}\n")
    print("| offloaded layers | step s | GB moved/step | H2D GB/s | transfer s | compute s | "
          "step / max(compute, transfer) | peak GiB |")
    print("|---|---|---|---|---|---|---|---|")
    for k, step_s, moved, bw, peak in results:
        transfer = moved / bw if moved and bw == bw else 0.0
        bound = max(compute, transfer)
        print(f"| {k} | {step_s:.3f} | {moved / 1e9:.2f} | {bw / 1e9:.1f} | {transfer:.3f} | {compute:.3f} | "
              f"{step_s / bound:.2f} | {peak / (1 << 30):.2f} |")
    print("\ntarget: step / max(compute, transfer) <= 1.10")


if __name__ == "__main__":
    main()
