"""Shared by the GPU training benchmarks (gpu_train_step.py, offload_sweep.py): a random model
folder made by `qtrain init-model`, a pre-tokenized dataset of random full-length rows, a
`qtrain train` run on them with its metrics.jsonl read back, and summary statistics. Nothing is
downloaded."""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time


def qtrain_binary(build):
    path = os.path.join(build, "apps", "qtrain")
    if not os.path.exists(path):
        sys.exit(f"{path} does not exist; build first (scripts/build.sh, or QTRAIN_BUILD={build})")
    return path


def make_model(qtrain, preset, out, dtype="bf16"):
    """The preset's random weights in `out` (made once; kept for the next run)."""
    if os.path.exists(os.path.join(out, "config.json")):
        return out
    t0 = time.time()
    print(f"[bench] writing the random {preset} model to {out} ...", flush=True)
    subprocess.run([qtrain, "init-model", "--arch", "llama", "--preset", preset, "--dtype", dtype,
                    "--out", out], check=True)
    print(f"[bench] model written in {time.time() - t0:.0f} s", flush=True)
    return out


def make_dataset(path, vocab_size, seq, rows, seed=0):
    """`rows` pre-tokenized rows of exactly `seq` random token ids (every token predicted)."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(rows):
            f.write(json.dumps({"input_ids": [rng.randrange(3, vocab_size) for _ in range(seq)]}) + "\n")
    return path


def run_qtrain(qtrain, work, model_dir, data, seq, steps, device, extra=None, launcher=None):
    """Trains `steps` steps (QLoRA NF4 + double quant, r 16 / alpha 32 all-linear, checkpointing
    on, micro-batch 1, bf16 on CUDA) and returns (metrics rows, stdout). `launcher`: the arguments
    that start the ranks before `train` (["launch", "--nproc", "2"]); none: one process."""
    os.makedirs(work, exist_ok=True)
    cfg = {
        "base_model": os.path.abspath(model_dir),
        "load_in_4bit": True, "adapter": "qlora", "bnb_4bit_quant_type": "nf4",
        "bnb_4bit_use_double_quant": True,
        "lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.0, "lora_target_linear": True,
        "datasets": [{"path": os.path.abspath(data), "type": "pretokenized"}],
        "sequence_len": seq, "micro_batch_size": 1, "gradient_accumulation_steps": 1,
        "max_steps": steps, "learning_rate": 1e-4, "lr_scheduler": "constant",
        "gradient_checkpointing": True, "bf16": "auto", "device": device,
        "output_dir": os.path.abspath(os.path.join(work, "out")), "logging_steps": 1, "seed": 0,
    }
    cfg.update(extra or {})
    path = os.path.join(work, "config.yaml")
    with open(path, "w") as f:
        for k, v in cfg.items():
            f.write(f"{k}: {json.dumps(v)}\n")
    metrics = os.path.join(cfg["output_dir"], "metrics.jsonl")
    # A benchmark run is never resumed: the last one's output goes, since qtrain refuses an
    # output_dir that already holds a run.
    shutil.rmtree(cfg["output_dir"], ignore_errors=True)
    res = subprocess.run([qtrain] + (launcher or []) + ["train", path], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"qtrain train {path} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    rows = [json.loads(line) for line in open(metrics)]
    return [r for r in rows if "loss" in r], res.stdout


def steady(values, skip):
    """Median of the values after the first `skip` (warm-up: allocator, kernels, caches)."""
    v = values[skip:] if len(values) > skip else values
    return statistics.median(v)


def arg_parser(doc, steps):
    """The options both GPU benchmarks take; a script adds its own."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--preset", default="llama3-8b")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default="bench-models")
    return ap


def setup(a, name):
    """The qtrain binary, the model folder (made on first use), its config.json, the work folder
    bench-models/<name> and the dataset of `a.steps` rows of `a.seq` tokens in it."""
    qtrain = qtrain_binary(a.build)
    model = make_model(qtrain, a.preset, os.path.join(a.models, f"llama-{a.preset}"),
                       "bf16" if a.device.startswith("cuda") else "fp32")
    config = json.load(open(os.path.join(model, "config.json")))
    work = os.path.join(a.models, name)
    os.makedirs(work, exist_ok=True)
    data = make_dataset(os.path.join(work, "data.jsonl"), config["vocab_size"], a.seq, a.steps)
    return qtrain, model, config, work, data
