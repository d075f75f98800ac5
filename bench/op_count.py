"""Operators dispatched per QLoRA training step on the CPU: qtrain against transformers + peft +
bitsandbytes, same model, in the same run (issue 26's operator-count target: at most half).

    ~/.cache/qtrain/venv/bin/python bench/op_count.py [--build build] [--seq 256]

Makes the model with `qtrain init-model --arch llama --preset small` (8 layers, hidden 512, vocab
8192; random weights), as bench/train_step_memory.py does. Both engines: NF4 with double
quantization, float32 compute, LoRA r=16 alpha=32 on all linear layers, batch 1, one step =
forward, backward, clip_grad_norm(1.0), AdamW (torch's default path on the CPU). The count is the
second step's "aten::" events, nested ones included: torch.profiler for Python, a RecordFunction
callback for qtrain (bench/op_count.cpp), the same ATen instrumentation. Host reads (syncs on
CUDA) per step are held by tests/engine/train/host_reads_test.cpp.
"""

import argparse
import json
import os
import subprocess
import sys
import time

PY_STEP = r"""
import collections, json, os, sys
os.environ["TORCHDYNAMO_DISABLE"] = "1"
import torch
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForCausalLM, BitsAndBytesConfig
from peft import LoraConfig, get_peft_model
model_dir, seq, checkpoint = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "every_layer"
q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                       bnb_4bit_compute_dtype=torch.float32)
model = AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=q, dtype=torch.float32, device_map="cpu")
model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0))
model.train()
if checkpoint:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.enable_input_require_grads()
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-4)
torch.manual_seed(0)
ids = torch.randint(0, model.config.vocab_size, (1, seq))
def step():
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    opt.zero_grad()
    return out.loss.item()
step()
with profile(activities=[ProfilerActivity.CPU]) as prof:
    loss = step()
names = collections.Counter(e.name for e in prof.events() if e.name.startswith("aten::"))
print(json.dumps({"engine": "transformers+peft+bitsandbytes", "checkpoint": "every_layer" if checkpoint else "none",
                  "seq": seq, "aten_ops": sum(names.values()), "loss": loss, "most": dict(names.most_common(12))}))
"""


def run(cmd):
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--seq", type=int, default=256)
    args = ap.parse_args()
    model_dir = os.path.join(args.build, "bench-models", "llama-small")
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        subprocess.run([os.path.join(args.build, "apps", "qtrain"), "init-model", "--arch", "llama", "--preset",
                        "small", "--out", model_dir], check=True)
    rows = []
    for checkpoint in ["none", "every_layer"]:
        ours = run([os.path.join(args.build, "bench", "qtrain_bench_op_count"), "--model", model_dir, "--seq",
                    str(args.seq), "--checkpoint", checkpoint])
        theirs = run([sys.executable, "-c", PY_STEP, model_dir, str(args.seq), checkpoint])
        rows.append((ours, theirs))
        print(json.dumps(ours))
        print(json.dumps(theirs))
    print(f"\n{time.strftime('%Y-%m-%d')}, llama 'small' preset, seq {args.seq}, NF4+DQ, LoRA r16 all-linear, fp32\n")
    print("| checkpointing | qtrain aten ops | transformers+peft+bitsandbytes aten ops | ratio |")
    print("|---|---|---|---|")
    for ours, theirs in rows:
        print(f"| {ours['checkpoint']} | {ours['aten_ops']} | {theirs['aten_ops']} | "
              f"{ours['aten_ops'] / theirs['aten_ops']:.2f} |")


if __name__ == "__main__":
    main()
