"""Step time and peak memory of LoRA training steps of a small mixture-of-experts model on the CPU:
qtrain against transformers + peft (+ bitsandbytes), side by side in one run.

    ~/.cache/qtrain/venv/bin/python bench/moe_step.py [--build build] [--seq 512] [--repeat 3] [--threads 1]

The model is a random Qwen3-MoE made here with transformers (4 layers, hidden 512, 8 heads over 4
KV heads, 16 experts of width 384, top-4 with norm_topk_prob, vocabulary 8192; float32). Both
engines: float32 compute, LoRA r=16 alpha=32 on q/k/v/o_proj and on both expert parameters
(PEFT's target_parameters: mlp.experts.gate_up_proj, mlp.experts.down_proj), batch 1, random
tokens, every token predicted. A step is one forward and backward (gradients dropped after it);
the step time is the median over --steps steps after one warm-up step, as wall-clock time and as
the process's CPU time (all its threads; on a machine shared with other work the CPU time is the
steadier number, and with --threads 1 it is the work done); the memory is the process's
peak resident memory over all steps (Linux VmHWM, reset through /proc/self/clear_refs after
loading) and the part of it above what the process held before the first step. Each
configuration runs in its own process, and the whole set --repeat times (interleaved); the table
gives the median of the repeats. Bases compared:

  fp32        both engines: no quantization, float32 experts
  nf4         both engines: NF4 with double quantization on the attention's linear layers
              (bitsandbytes: load_in_4bit), experts float32 (transformers cannot quantize its
              fused 3-D experts; qtrain with quantize_moe_experts: false)
  nf4-experts qtrain quantizes the experts too (quantize_moe_experts: true, per expert NF4 + DQ);
              transformers as in nf4 (its experts stay float32)

transformers gets checkpointing the way that works: model.train() first, then
gradient_checkpointing_enable(use_reentrant=True) and enable_input_require_grads().
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PY_STEP = r"""
import json, os, sys, time
os.environ["TORCHDYNAMO_DISABLE"] = "1"
import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig
from peft import LoraConfig, get_peft_model
model_dir, seq, checkpoint, quant, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "every_layer", sys.argv[4], int(sys.argv[5])
if int(sys.argv[6]) > 0:
    torch.set_num_threads(int(sys.argv[6]))
def kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
kwargs = {}
if quant == "nf4":
    kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                       bnb_4bit_use_double_quant=True,
                                                       bnb_4bit_compute_dtype=torch.float32)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, device_map="cpu", **kwargs)
impl = model.config._experts_implementation
model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                                         target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                                         target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]))
model.train()
if checkpoint:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.enable_input_require_grads()
torch.manual_seed(0)
ids = torch.randint(0, model.config.vocab_size, (1, seq))
before = kib("VmRSS")
open("/proc/self/clear_refs", "w").write("5")
times, cpu_times, loss = [], [], None
for s in range(1 + steps):
    t0, c0 = time.perf_counter(), time.process_time()
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    model.zero_grad(set_to_none=True)
    dt, ct = time.perf_counter() - t0, time.process_time() - c0
    if s == 0:
        loss = out.loss.item()
    else:
        times.append(dt)
        cpu_times.append(ct)
    del out
peak = kib("VmHWM")
times.sort()
cpu_times.sort()
print(json.dumps({"engine": "transformers+peft", "checkpoint": "every_layer" if checkpoint else "none", "seq": seq,
                  "rss_before_step_bytes": before * 1024, "step_peak_above_before_bytes": (peak - before) * 1024,
                  "peak_rss_bytes": peak * 1024, "loss": loss, "step_seconds": times[len(times) // 2],
                  "step_seconds_all": times,
                  "step_cpu_seconds": cpu_times[len(cpu_times) // 2], "threads": torch.get_num_threads(), "experts_implementation": impl}))
"""

MAKE_MODEL = r"""
import os, sys
os.environ["TORCHDYNAMO_DISABLE"] = "1"
import torch
from transformers import AutoModelForCausalLM, Qwen3MoeConfig
torch.manual_seed(0)
cfg = Qwen3MoeConfig(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4, head_dim=64,
                     intermediate_size=1536, moe_intermediate_size=384, num_experts=16, num_experts_per_tok=4,
                     norm_topk_prob=True, vocab_size=8192, max_position_embeddings=4096, initializer_range=0.02)
AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(sys.argv[1])
"""

# (label, qtrain arguments, transformers base)
BASES = [
    ("fp32", ["--quant", "none"], "none"),
    ("nf4", ["--quant", "nf4", "--quantize-experts", "false"], "nf4"),
    ("nf4-experts", ["--quant", "nf4", "--quantize-experts", "true"], "nf4"),
]


def run(cmd):
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--checkpoint", nargs="+", default=["none", "every_layer"])
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads of both engines (0: torch's default)")
    ap.add_argument("--model", default=None, help="model folder (default: made here)")
    args = ap.parse_args()
    model_dir = args.model or os.path.join(args.build, "bench-models", "qwen3-moe-16x4")
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        subprocess.run([sys.executable, "-c", MAKE_MODEL, model_dir], check=True)
    qtrain = os.path.join(args.build, "bench", "qtrain_bench_moe_step")
    results = {}  # (base, checkpoint, engine) -> list of rows
    loads = []
    hf_done = {}
    for rep in range(args.repeat):
        for checkpoint in args.checkpoint:
            for base, qargs, hf_quant in BASES:
                loads.append(os.getloadavg()[0])
                q = run([qtrain, "--model", model_dir, "--seq", str(args.seq), "--steps", str(args.steps),
                         "--checkpoint", checkpoint, "--threads", str(args.threads)] + qargs)
                results.setdefault((base, checkpoint, "qtrain"), []).append(q)
                # transformers runs the same base for nf4 and nf4-experts: once per repeat.
                key = (rep, checkpoint, hf_quant)
                if key not in hf_done:
                    loads.append(os.getloadavg()[0])
                    hf_done[key] = run([sys.executable, "-c", PY_STEP, model_dir, str(args.seq), checkpoint, hf_quant,
                                        str(args.steps), str(args.threads)])
                results.setdefault((base, checkpoint, "transformers+peft"), []).append(hf_done[key])
            print(f"[bench] repeat {rep + 1}/{args.repeat}, checkpointing {checkpoint} done", file=sys.stderr,
                  flush=True)

    def med(rows, field):
        return statistics.median(r[field] for r in rows)

    threads = results[(BASES[0][0], args.checkpoint[0], "qtrain")][0]["threads"]
    print(f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, {threads} thread(s) per engine, Qwen3-MoE 4 layers x 16 "
          f"experts top-4, seq {args.seq}, batch 1, fp32 compute, LoRA r16 attention + experts; median of "
          f"{args.repeat} runs x {args.steps} steps; load average during the runs {min(loads):.1f} to {max(loads):.1f}; "
          f"transformers experts: "
          f"{results[(BASES[0][0], args.checkpoint[0], 'transformers+peft')][0]['experts_implementation']}")
    print()
    print("| base | checkpointing | qtrain step CPU s | HF step CPU s | qtrain / HF CPU time | qtrain step wall s "
          "| HF step wall s | qtrain peak RSS MiB | HF peak RSS MiB | qtrain / HF peak | qtrain step peak above pre-step MiB "
          "| HF step peak above pre-step MiB | qtrain / HF step peak | loss qtrain / HF |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for checkpoint in args.checkpoint:
        for base, _, _ in BASES:
            q = results[(base, checkpoint, "qtrain")]
            t = results[(base, checkpoint, "transformers+peft")]
            qc, tc = med(q, "step_cpu_seconds"), med(t, "step_cpu_seconds")
            qs, ts = med(q, "step_seconds"), med(t, "step_seconds")
            qp, tp = med(q, "peak_rss_bytes"), med(t, "peak_rss_bytes")
            qa, ta = med(q, "step_peak_above_before_bytes"), med(t, "step_peak_above_before_bytes")
            print(f"| {base} | {checkpoint} | {qc:.2f} | {tc:.2f} | {qc / tc:.2f} | {qs:.2f} | {ts:.2f} | "
                  f"{qp / 2**20:.0f} | {tp / 2**20:.0f} | {qp / tp:.2f} | {qa / 2**20:.0f} | {ta / 2**20:.0f} | "
                  f"{qa / ta:.2f} | {q[0]['loss']:.4f} / {t[0]['loss']:.4f} |")
    print()
    print(json.dumps({f"{k[0]}|{k[1]}|{k[2]}": v for k, v in results.items()}))


if __name__ == "__main__":
    main()
