"""Gemma 4 26B-A4B QLoRA on one GPU held to 24 GiB: tokens/s, peak memory and offload traffic,
and INT8-LoRA with offloaded layers against max(compute, transfer).

    python bench/moe_gpu_step.py --build build [--layers 30] [--seq 2048] [--steps 8]
        [--gpu-memory 24GiB] [--device cuda] [--models bench-models]

Model: `qtrain init-model --arch gemma4 --preset gemma4-26b-a4b --dtype bf16` (random weights,
made on first use in bench-models/; all 30 layers are about 50 GB on disk, so `--layers N` keeps
the first N with their own shapes, the last one full). Runs, each `--steps` steps of one packed
row of `--seq` tokens (rows of seq/4 random tokens, sample_packing), LoRA r=16 alpha=32 on
q/k/v/o and on the experts (PEFT's target_parameters experts.gate_up_proj and down_proj),
checkpointing on, bf16, `gpu_memory_limit` = `--gpu-memory` with offload_layers: auto (as
`qtrain plan` chooses):
  nf4      NF4 + double quantization (the 24 GiB target: >= 3,000 tokens/s on an H100 for 30
           layers);
  int8     LLM.int8 base, the same cap (layers offloaded to pinned host RAM);
  int8-all INT8 with no cap and nothing offloaded: the compute time the offloaded run is held to.
tokens/s is the median after the first 3 steps; peak is the CUDA allocator's. With --layers N < 30
the 30-layer figure is estimated as tokens/s x N / 30 (the embedding and loss are counted N/30
times too, so it errs low). For INT8, transfer = offload_bytes_per_step / the pinned
host-to-device bandwidth that `qtrain train` measures at start-up; the bound is max(compute,
transfer). `--preset tiny-moe --device cpu --seq 128 --steps 4` checks the script on a machine
without a GPU (no cap or offload there; numbers meaningless).
"""

import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qtrain_bench  # noqa: E402

FULL_LAYERS = 30


def make_model(qtrain, preset, layers, out, dtype):
    if os.path.exists(os.path.join(out, "config.json")):
        return out
    t0 = time.time()
    print(f"[bench] writing the random gemma4 {preset} ({layers or 'all'} layers) to {out} ...", flush=True)
    cmd = [qtrain, "init-model", "--arch", "gemma4", "--preset", preset, "--dtype", dtype, "--out", out]
    if layers:
        cmd += ["--layers", str(layers)]
    subprocess.run(cmd, check=True)
    print(f"[bench] model written in {time.time() - t0:.0f} s", flush=True)
    return out


def main():
    ap = qtrain_bench.arg_parser(__doc__, steps=8)
    ap.set_defaults(preset="gemma4-26b-a4b")
    ap.add_argument("--layers", type=int, default=0, help="keep the first N layers (0: all)")
    ap.add_argument("--gpu-memory", default="24GiB")
    ap.add_argument("--runs", default="nf4,int8,int8-all")
    a = ap.parse_args()
    cuda = a.device.startswith("cuda")
    qtrain = qtrain_bench.qtrain_binary(a.build)
    name = f"gemma4-{a.preset}" + (f"-{a.layers}l" if a.layers else "")
    model = make_model(qtrain, a.preset, a.layers, os.path.join(a.models, name), "bf16" if cuda else "fp32")
    config = json.load(open(os.path.join(model, "config.json")))
    layers = config["num_hidden_layers"]
    work = os.path.join(a.models, f"moe-{name}-{a.seq}")
    os.makedirs(work, exist_ok=True)
    # Four rows of seq/4 tokens pack into each row of seq.
    data = qtrain_bench.make_dataset(os.path.join(work, "data.jsonl"), config["vocab_size"], a.seq // 4, 4 * a.steps)
    common = {
        "lora_target_linear": False,
        "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "lora_target_parameters": ["experts.gate_up_proj", "experts.down_proj"],
        "sample_packing": True,
    }
    capped = {"gpu_memory_limit": a.gpu_memory, "offload_layers": "auto"} if cuda else {}
    int8 = {"load_in_4bit": False, "load_in_8bit": True, "adapter": "lora"}
    runs = {"nf4": {**common, **capped}, "int8": {**common, **int8, **capped}, "int8-all": {**common, **int8}}
    results = {}
    for run in a.runs.split(","):
        metrics, out = qtrain_bench.run_qtrain(qtrain, os.path.join(work, run), model, data, a.seq, a.steps, a.device,
                                               runs[run])
        tps = qtrain_bench.steady([m["tokens_per_second"] for m in metrics], 3)
        peak = max(m["peak_memory_bytes"] for m in metrics)
        planned = max(m.get("planned_peak_bytes", -1) for m in metrics)
        offload = qtrain_bench.steady([m["offload_bytes_per_step"] for m in metrics], 3)
        bw = re.search(r"pinned host-to-device copies at ([0-9.]+) GB/s", out)
        results[run] = (tps, peak, offload, float(bw.group(1)) * 1e9 if bw else None, planned)
        print(f"[bench] {run}: {tps:.0f} tok/s, peak {peak / 2**30:.2f} GiB, "
              f"offload {offload / 2**30:.2f} GiB/step", flush=True)
    print(f"\n{a.preset}, {layers} of {FULL_LAYERS} layers, sequence {a.seq} packed, {a.device}, "
          f"cap {a.gpu_memory if cuda else 'none'}, {a.steps} steps (median after 3)\n")
    print("| run | tokens/s | tokens/s for 30 layers (est.) | peak | planned peak | offloaded per step |")
    print("|---|---:|---:|---:|---:|---:|")
    for run, (tps, peak, offload, _, planned) in results.items():
        plan = f"{planned / 2**30:.2f} GiB ({planned / peak:.2f}x)" if planned > 0 and peak > 0 else "-"
        print(f"| {run} | {tps:.0f} | {tps * layers / FULL_LAYERS:.0f} | {peak / 2**30:.2f} GiB | {plan} | "
              f"{offload / 2**30:.2f} GiB |")
    if "int8" in results and "int8-all" in results and results["int8"][3]:
        # A step trains one packed row: about --seq tokens.
        step = a.seq / results["int8"][0]
        compute = a.seq / results["int8-all"][0]
        transfer = results["int8"][2] / results["int8"][3]
        bound = max(compute, transfer)
        print(f"\nINT8 with offload: step {step:.3f} s; compute {compute:.3f} s, transfer {transfer:.3f} s "
              f"at {results['int8'][3] / 1e9:.1f} GB/s; step / max(compute, transfer) = {step / bound:.2f}")


if __name__ == "__main__":
    main()
