"""A DPO (or KTO) step on the CPU: qtrain's `rl: dpo` against TRL 1.16's DPOTrainer (`rl: kto`
against its KTOTrainer; transformers + peft + bitsandbytes), same model, same rows, same threads,
in the same run.

    ~/.cache/qtrain/venv/bin/python bench/preference_step.py [--build build] [--threads 2] [--objective kto]

KTO: 16 pre-tokenized rows (prompt 128 tokens, completion 128, desirable and undesirable in turn),
4 rows per step (one micro-batch, whose KL rows are its own completions rotated), handed to
KTOTrainer as numbers that its tokenizer call reads back (as scripts/reference/kto_reference.py
does); a step is the reference over the 4 rows and their 4 KL rows, the model over the KL rows
under no gradient, then over the rows with gradients. The rest as for DPO:

Makes the model with `qtrain init-model --arch llama --preset small` (8 layers, hidden 512, vocab
8192; random weights), as bench/train_step_memory.py does, and 16 pre-tokenized pairs of random
ids (prompt 128 tokens, chosen 128, rejected 96). Both engines: NF4 with double quantization,
float32 compute, a new LoRA adapter r=16 alpha=32 on all linear layers, 2 pairs per step (one
micro-batch of 4 rows), no gradient checkpointing, the reference the base with the adapter off;
qtrain also with precompute_ref_log_probs. Step time: the mean wall time of steps 3 to 8 (the
first two warm caches), TRL's from a callback around each step, qtrain's from the difference of
an 8-step and a 2-step run. Memory: the process's peak resident set (VmHWM), which holds the model
on both sides.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

from qtrain_bench import make_model, qtrain_binary

TRL_STEPS = r"""
import json, os, sys, time
os.environ["TORCHDYNAMO_DISABLE"] = "1"
import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig, TrainerCallback
from trl import DPOConfig, DPOTrainer
from trl.trainer.dpo_trainer import DataCollatorForPreference
model_dir, pairs_path, tokenizer_dir, out, threads = sys.argv[1:6]
torch.set_num_threads(int(threads))
q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                       bnb_4bit_compute_dtype=torch.float32)
model = AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=q, dtype=torch.float32, device_map="cpu")
rows = [json.loads(l) for l in open(pairs_path) if l.strip()]
DPOTrainer._prepare_dataset = lambda self, dataset, *a, **k: dataset  # already token ids
times = []
class Clock(TrainerCallback):
    def on_step_begin(self, args, state, control, **kw): self.t0 = time.perf_counter()
    def on_step_end(self, args, state, control, **kw): times.append(time.perf_counter() - self.t0)
args = DPOConfig(output_dir=out, per_device_train_batch_size=2, max_steps=8, learning_rate=1e-4, logging_steps=1,
                 report_to=[], use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False, save_strategy="no",
                 max_length=512, remove_unused_columns=False, beta=0.1, seed=3)
trainer = DPOTrainer(model=model, train_dataset=Dataset.from_list(rows), processing_class=AutoTokenizer.from_pretrained(tokenizer_dir),
                     args=args, data_collator=DataCollatorForPreference(pad_token_id=0, max_length=512),
                     peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0),
                     callbacks=[Clock()])
trainer.train()
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"step_seconds": sum(times[2:]) / len(times[2:]), "peak_rss_bytes": peak * 1024}))
"""

KTO_STEPS = r"""
import json, os, sys, time
os.environ["TORCHDYNAMO_DISABLE"] = "1"
import torch
import trl.trainer.kto_trainer as kto_trainer
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig, TrainerCallback
from trl import KTOConfig, KTOTrainer
model_dir, rows_path, tokenizer_dir, out, threads, reference_dir = sys.argv[1:7]
sys.path.insert(0, reference_dir)
from kto_reference import as_text, ids_of_text  # token ids through KTOTrainer's own preparation
torch.set_num_threads(int(threads))
q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                       bnb_4bit_compute_dtype=torch.float32)
model = AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=q, dtype=torch.float32, device_map="cpu")
kto_trainer._tokenize = ids_of_text
rows = [as_text(json.loads(l)) for l in open(rows_path) if l.strip()]
tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
tokenizer.pad_token = tokenizer.convert_ids_to_tokens(0)
times = []
class Clock(TrainerCallback):
    def on_step_begin(self, args, state, control, **kw): self.t0 = time.perf_counter()
    def on_step_end(self, args, state, control, **kw): times.append(time.perf_counter() - self.t0)
args = KTOConfig(output_dir=out, per_device_train_batch_size=4, max_steps=8, learning_rate=1e-4, logging_steps=1,
                 report_to=[], use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False, save_strategy="no",
                 max_length=512, beta=0.1, seed=3)
trainer = KTOTrainer(model=model, train_dataset=Dataset.from_list(rows), processing_class=tokenizer, args=args,
                     peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0),
                     callbacks=[Clock()])
trainer.train()
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"step_seconds": sum(times[2:]) / len(times[2:]), "peak_rss_bytes": peak * 1024}))
"""


def qtrain_run(build, model_dir, pairs, out, steps, threads, precompute, objective):
    cfg = os.path.join(out, f"{objective}-{steps}-{precompute}.yaml")
    batch = 4 if objective == "kto" else 2
    with open(cfg, "w") as f:
        f.write(f"base_model: {os.path.abspath(model_dir)}\nload_in_4bit: true\nadapter: qlora\nlora_r: 16\n"
                f"lora_alpha: 32\nlora_target_linear: true\nrl: {objective}\nrl_beta: 0.1\n"
                f"precompute_ref_log_probs: {'true' if precompute else 'false'}\n"
                f"datasets:\n  - path: {pairs}\nsequence_len: 512\nmicro_batch_size: {batch}\nmax_steps: {steps}\n"
                f"learning_rate: 0.0001\ngradient_checkpointing: false\ndevice: cpu\nlogging_steps: 1\n"
                f"seed: 3\noutput_dir: {os.path.join(out, f'q-{steps}-{precompute}')}\n")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    t0 = time.perf_counter()
    subprocess.run([os.path.join(build, "apps", "qtrain"), "train", cfg], check=True, capture_output=True, env=env)
    seconds = time.perf_counter() - t0
    rows = [json.loads(l) for l in open(os.path.join(out, f"q-{steps}-{precompute}", "metrics.jsonl"))]
    return seconds, max(r.get("peak_memory_bytes", 0) for r in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--objective", choices=["dpo", "kto"], default="dpo")
    args = ap.parse_args()
    kto = args.objective == "kto"
    trainer = "TRL 1.16 KTOTrainer" if kto else "TRL 1.16 DPOTrainer"
    model_dir = make_model(qtrain_binary(args.build), "small", os.path.join(args.build, "bench-models", "llama-small"),
                           dtype="fp32")
    tokenizer_dir = os.path.join(args.build, "fixtures", "tokenizers", "llama3")
    rng = random.Random(5)
    with tempfile.TemporaryDirectory() as out:
        pairs = os.path.join(out, "pairs.jsonl")
        with open(pairs, "w") as f:
            for i in range(16):
                ids = lambda n: [rng.randrange(8192) for _ in range(n)]
                row = {"prompt_ids": ids(128), "completion_ids": ids(128), "label": i % 2 == 0} if kto else \
                    {"prompt_ids": ids(128), "chosen_ids": ids(128), "rejected_ids": ids(96)}
                f.write(json.dumps(row) + "\n")
        results = {}
        for precompute in [False, True]:
            t8, peak = qtrain_run(args.build, model_dir, pairs, out, 8, args.threads, precompute, args.objective)
            t2, _ = qtrain_run(args.build, model_dir, pairs, out, 2, args.threads, precompute, args.objective)
            results["qtrain" + (" (precompute_ref_log_probs)" if precompute else "")] = ((t8 - t2) / 6, peak)
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        reference_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "reference")
        res = subprocess.run([sys.executable, "-c", KTO_STEPS if kto else TRL_STEPS, model_dir, pairs, tokenizer_dir,
                              os.path.join(out, "trl"), str(args.threads), reference_dir],
                             check=True, capture_output=True, text=True, env=env)
        trl = json.loads(res.stdout.strip().splitlines()[-1])
        results[trainer] = (trl["step_seconds"], trl["peak_rss_bytes"])
    base_s, base_peak = results[trainer]
    shape = "4 rows of 256 tokens" if kto else "2 pairs of 256 and 224 tokens"
    print(f"{time.strftime('%Y-%m-%d')}, {args.threads} threads, llama 'small' preset, NF4+DQ, LoRA r16 all-linear, "
          f"fp32, rl: {args.objective}, {shape} per step")
    print()
    print("| engine | step time (s) | step time / TRL's | peak RSS (MiB) | peak / TRL's |")
    print("|---|---|---|---|---|")
    for name, (s, peak) in results.items():
        print(f"| {name} | {s:.3f} | {s / base_s:.2f} | {peak / 2**20:.0f} | {peak / base_peak:.2f} |")


if __name__ == "__main__":
    main()
