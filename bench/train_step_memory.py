"""Peak memory of one QLoRA training step on the CPU: qtrain vs transformers + peft +
bitsandbytes, with gradient checkpointing off and on, in the same run.

    ~/.cache/qtrain/venv/bin/python bench/train_step_memory.py [--build build] [--seq 1024]

Makes the model with `qtrain init-model --arch llama --preset small` (8 layers, hidden 512,
vocab 8192; random weights). Both engines: NF4 with double quantization, float32 compute, LoRA
r=16 alpha=32 on all linear layers, batch 1. Each configuration runs in its own process; the
number reported is the step's peak resident memory above what the process held just before the
step (Linux VmHWM after a reset through /proc/self/clear_refs), so model loading is excluded.
transformers gets checkpointing the way that works: model.train() first, then
gradient_checkpointing_enable(use_reentrant=True) and enable_input_require_grads().
"""

import argparse
import json
import os
import subprocess
import sys
import time

PY_STEP = r"""
import json, os, sys, time
os.environ["TORCHDYNAMO_DISABLE"] = "1"
import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig
from peft import LoraConfig, get_peft_model
model_dir, seq, checkpoint = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "every_layer"
def kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                       bnb_4bit_compute_dtype=torch.float32)
model = AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=q, dtype=torch.float32, device_map="cpu")
model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0))
model.train()
if checkpoint:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.enable_input_require_grads()
torch.manual_seed(0)
ids = torch.randint(0, model.config.vocab_size, (1, seq))
before = kib("VmRSS")
open("/proc/self/clear_refs", "w").write("5")
t0 = time.perf_counter()
out = model(input_ids=ids, labels=ids)
out.loss.backward()
seconds = time.perf_counter() - t0
peak = kib("VmHWM")
print(json.dumps({"engine": "transformers+peft+bitsandbytes", "checkpoint": "every_layer" if checkpoint else "none",
                  "seq": seq, "rss_before_step_bytes": before * 1024,
                  "step_peak_above_before_bytes": (peak - before) * 1024, "loss": out.loss.item(),
                  "step_seconds": seconds}))
"""


def run(cmd):
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--model", default=None, help="model folder (default: made with qtrain init-model)")
    args = ap.parse_args()
    model_dir = args.model or os.path.join(args.build, "bench-models", "llama-small")
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        subprocess.run([os.path.join(args.build, "apps", "qtrain"), "init-model", "--arch", "llama", "--preset",
                        "small", "--out", model_dir], check=True)
    rows = []
    for checkpoint in ["none", "every_layer"]:
        rows.append(run([os.path.join(args.build, "bench", "qtrain_bench_train_step"), "--model", model_dir, "--seq",
                         str(args.seq), "--checkpoint", checkpoint]))
        rows.append(run([sys.executable, "-c", PY_STEP, model_dir, str(args.seq), checkpoint]))
    print(f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, llama 'small' preset, seq {args.seq}, batch 1, "
          "NF4+DQ, LoRA r16 all-linear, fp32")
    print()
    print("| checkpointing | engine | step peak above pre-step RSS (MiB) | step time (s) | loss |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['checkpoint']} | {r['engine']} | {r['step_peak_above_before_bytes'] / 2**20:.0f} | "
              f"{r['step_seconds']:.2f} | {r['loss']:.4f} |")
    by = {(r["engine"], r["checkpoint"]): r["step_peak_above_before_bytes"] for r in rows}
    for ck in ["none", "every_layer"]:
        q, t = by[("qtrain", ck)], by[("transformers+peft+bitsandbytes", ck)]
        print(f"\nqtrain / transformers peak ratio, checkpointing {ck}: {q / t:.2f}")


if __name__ == "__main__":
    main()
