"""Data-parallel scaling: tokens/s, time in collectives and peak memory of rank 0 for 1, 2, ...
ranks started by `qtrain launch`, with the base whole on every rank and sharded over them
(shard_base), on the same model and data.

    python bench/dist_scaling.py --build build [--ranks 1,2,4,8] [--preset llama3.2-1b]
        [--seq 2048] [--steps 12] [--device cuda]

Model: `qtrain init-model --arch llama --preset PRESET` (random weights, made on first use in
bench-models/). Every run: NF4 + double quantization, LoRA r=16 alpha=32 on all linear layers,
checkpointing on, micro-batch 1 of `--seq` tokens and gradient accumulation 1 per rank, so a
step of N ranks trains N times the tokens of a step of one. tokens/s is the whole step's over all
ranks (what qtrain logs), the median after the first 3 steps; efficiency is tokens/s divided by
N times the one-rank tokens/s. comm s/step is `comm_seconds` from metrics.jsonl: the seconds per
step rank 0 spent waiting in collectives (gradient sums, and with shard_base the part of the
layer gathers not hidden behind the compute). Peak memory is rank 0's: the CUDA allocator's peak
on a GPU, the process's peak resident set on the CPU. On GPUs each rank takes cuda:LOCAL_RANK;
`--ranks` beyond the GPU count fails. `--preset tiny --device cpu --ranks 1,2 --seq 64` runs
on a machine without a GPU (Gloo; ranks share its cores, so the CPU figures show the
machinery, not scaling).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qtrain_bench  # noqa: E402


def main():
    ap = qtrain_bench.arg_parser(__doc__, steps=12)
    ap.add_argument("--ranks", default="1,2")
    a = ap.parse_args()
    ranks = [int(r) for r in a.ranks.split(",")]
    qtrain, model, config, work, _ = qtrain_bench.setup(a, f"dist-{a.preset}-{a.seq}")
    # Every rank reads every batch of a step (Note [Data-parallel steps]): rows for the largest run.
    data = qtrain_bench.make_dataset(os.path.join(work, "data-scaling.jsonl"), config["vocab_size"], a.seq,
                                     a.steps * max(ranks))
    rows = []
    for shard in (False, True):
        for n in ranks:
            name = f"{'sharded' if shard else 'whole'}-{n}"
            extra = {"shard_base": True} if shard else {}
            metrics, _ = qtrain_bench.run_qtrain(qtrain, os.path.join(work, name), model, data, a.seq, a.steps,
                                                 a.device, extra,
                                                 launcher=["launch", "--nproc", str(n), "--master-port", "0"])
            tps = qtrain_bench.steady([m["tokens_per_second"] for m in metrics], 3)
            comm = qtrain_bench.steady([m["comm_seconds"] for m in metrics], 3)
            peak = max(m["peak_memory_bytes"] for m in metrics)
            rows.append((shard, n, tps, comm, peak))
            print(f"[bench] {name}: {tps:.0f} tok/s, {comm:.3f} s/step in collectives, "
                  f"peak {peak / 2**30:.2f} GiB", flush=True)
    print(f"\n{a.preset}, sequence {a.seq}, {a.device}, {a.steps} steps (median after 3)\n")
    print("| base | ranks | tokens/s | efficiency | comm s/step | rank 0 peak |")
    print("|---|---:|---:|---:|---:|---:|")
    for shard, n, tps, comm, peak in rows:
        one = next(t for s, m, t, _, _ in rows if s == shard and m == ranks[0]) / ranks[0]
        print(f"| {'sharded' if shard else 'whole'} | {n} | {tps:.0f} | {tps / (n * one):.2f} | {comm:.3f} | "
              f"{peak / 2**30:.2f} GiB |")


if __name__ == "__main__":
    main()
