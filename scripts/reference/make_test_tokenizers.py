#!/usr/bin/env python3
"""Build small, faithful stand-in tokenizers for token-for-token parity tests.

Each stand-in uses exactly the pipeline components (normalizer, pre_tokenizer,
model flags, post_processor, decoder, added-token flags, id layout) of a real
model family's tokenizer.json as produced by HF `tokenizers` 0.23, but with a
small vocabulary trained here.  For every family the script writes:

    OUT/<family>/tokenizer.json         the stand-in (what qtrain must load)
    OUT/<family>/tokenizer_config.json  what transformers reads next to it
    OUT/<family>/config.json            minimal, so AutoTokenizer can pick a class
    OUT/<family>/golden.jsonl           {"text", "ids", "ids_special", "tokens"} per test string

and then checks: reload == original, decode(encode(x)) round-trips (with the
family's documented exceptions), and whether transformers' AutoTokenizer gives
the same ids as `tokenizers.Tokenizer.from_file` (the parity target).

Families: llama3, qwen3, mistral_v01 (SentencePiece-style legacy),
mistral_tekken, gemma3, gemma4, llama2_nonlegacy (a Llama-2 style tokenizer.json whose
tokenizer_config says legacy=false, to show transformers v5 rebuilding it).

Usage (this is test tooling; it is never run by qtrain itself; scripts/reference/
tokenizer_reference.py imports it for the parity tests):
    TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 \
      python scripts/reference/make_test_tokenizers.py --out /tmp/tok_standins [--corpus FILE ...]
Without --corpus it trains on text found on a Debian machine (gettext catalogs
under /usr/share/locale and the Python stdlib), falling back to a built-in text.
"""
import argparse
import glob
import json
import os
import random
import sys
import unicodedata

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models,
                        normalizers, pre_tokenizers, processors, trainers)

# ---------------------------------------------------------------------------
# Regexes exactly as they appear in the real tokenizer.json files.
R_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
R_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
           r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
R_TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
            r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

BYTE_TOKENS = ["<0x%02X>" % b for b in range(256)]

# Test strings chosen to hit every rule that differs between engines.
BASE_TESTS = [
    "", " ", "  ", "\n", "Hello world", " Hello", "  Hello", "Hello ", "Hello  ",
    "multiple   spaces   between words", "tabs\tand\nnewlines\r\nand\rCR",
    "\n\n\nblank lines\n\n", "trailing newline\n", "   \n  indented\n\tcode",
    "digits 1 12 123 1234 12345 1234567 3.14159 -42 1,000,000",
    "contractions: don't I'M we'Re you'LL he'd it'S 'tis O'Neil",
    "'s at start", "long s: 'ſ and 'ſt", "Kelvin 'K", "HTTPServer CamelCaseWord iPhone XMLHttpRequest",
    "CJK: 日本語のテキスト、中文文本。한국어 텍스트", "emoji 👍🏽 👨‍👩‍👧 ❤️ 🇩🇪",
    "combining: e\u0301 vs \u00e9, A\u030a vs \u00c5", "NBSP\u00a0here", "ideographic\u3000space",
    "zero\u200bwidth\u200cjoiner\u200d", "line\u2028sep\u2029para", "nel\u0085char",
    "\u2581 literal metaspace \u2581\u2581x", "Ωμέγα Ελληνικά", "Русский текст, ёлка.",
    "العربية مع أرقام ١٢٣", "हिन्दी पाठ", "ไทย", "Tiếng Việt có dấu",
    "control \x01\x07\x1b[0m chars", "math: ∑_{i=1}^{n} x² ≤ ∞", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛", "\U0010FFFD private",
    "code:\ndef f(x):\n    return x**2  # square\n", "url https://example.com/a/b?c=d&e=f#g",
    "a" * 300, "ab " * 100, "x" + " " * 40 + "y", ".\n.\n.", "!!!???...", "(\"quoted\")",
]

# Family definitions -----------------------------------------------------------


def byte_level_pre(regex, trim_offsets):
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=trim_offsets, use_regex=False),
    ])


FAMILIES = {
    "llama3": dict(kind="bytelevel", regex=R_LLAMA3, normalizer=None, trim_offsets=True,
                   ignore_merges=True, merges_format="strings", vocab=4000,
                   specials=["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                             "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>",
                             "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"],
                   nonspecial=[], bos="<|begin_of_text|>", eos="<|eot_id|>",
                   tok_config=dict(tokenizer_class="PreTrainedTokenizerFast",
                                   bos_token="<|begin_of_text|>", eos_token="<|eot_id|>"),
                   model_type="llama"),
    "qwen3": dict(kind="bytelevel", regex=R_QWEN2, normalizer="NFC", trim_offsets=False,
                  ignore_merges=False, merges_format="pairs", vocab=4000,
                  specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                            "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                            "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                            "<|image_pad|>", "<|video_pad|>"],
                  nonspecial=["<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
                              "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
                              "<tool_response>", "</tool_response>", "<think>", "</think>"],
                  bos=None, eos="<|im_end|>",
                  tok_config=dict(tokenizer_class="Qwen2Tokenizer", add_bos_token=False,
                                  add_prefix_space=False, bos_token=None, eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>", unk_token=None, errors="replace",
                                  split_special_tokens=False),
                  model_type="qwen3"),
    "mistral_tekken": dict(kind="bytelevel", regex=R_TEKKEN, normalizer=None, trim_offsets=True,
                           ignore_merges=True, merges_format="pairs", vocab=4000,
                           specials=["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]",
                                     "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]",
                                     "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
                                     "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]",
                                     "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"]
                           + ["<SPECIAL_%d>" % i for i in range(20, 40)],
                           specials_first=True, nonspecial=[], bos="<s>", eos="</s>",
                           # transformers 5.23 ignores add_bos_token when tokenizer.json exists (checked)
                           tok_config=dict(tokenizer_class="PreTrainedTokenizerFast", add_bos_token=True,
                                           bos_token="<s>", eos_token="</s>", unk_token="<unk>"),
                           model_type="mistral"),
    "mistral_v01": dict(kind="spm", flavour="llama_legacy", vocab=3000,
                        head=["<unk>", "<s>", "</s>"], specials=["<unk>", "<s>", "</s>"],
                        nonspecial=[], bos="<s>", eos="</s>", unk="<unk>",
                        tok_config=dict(tokenizer_class="LlamaTokenizer", add_bos_token=True,
                                        add_eos_token=False, bos_token="<s>", eos_token="</s>",
                                        unk_token="<unk>", legacy=True, pad_token=None),
                        model_type="mistral"),
    "llama2_nonlegacy": dict(kind="spm", flavour="llama_legacy", vocab=3000,
                             head=["<unk>", "<s>", "</s>"], specials=["<unk>", "<s>", "</s>"],
                             nonspecial=[], bos="<s>", eos="</s>", unk="<unk>",
                             tok_config=dict(tokenizer_class="LlamaTokenizer", add_bos_token=True,
                                             add_eos_token=False, bos_token="<s>", eos_token="</s>",
                                             unk_token="<unk>", legacy=False, pad_token=None),
                             model_type="llama"),
    "gemma3": dict(kind="spm", flavour="gemma", vocab=3000,
                   head=["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "[@BOS@]",
                         "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>"],
                   specials=["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "[@BOS@]",
                             "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>"],
                   # user-defined SentencePiece pieces become non-special added tokens
                   nonspecial=["<h1>", "</h1>", "\t\t", "\n\n\n"],
                   bos="<bos>", eos="<eos>", unk="<unk>",
                   tok_config=dict(tokenizer_class="GemmaTokenizer", add_bos_token=True,
                                   add_eos_token=False, bos_token="<bos>", eos_token="<eos>",
                                   unk_token="<unk>", pad_token="<pad>"),
                   model_type="gemma3_text"),
}


# Gemma 4: Gemma 3's SentencePiece-style pipeline and config with Gemma 4's turn, thinking, tool
# and media tokens in place of Gemma 3's turn and image tokens (the real ids are not reproduced:
# <|turn>/<turn|> are 106 there).
_GEMMA4_TOKENS = ["<|turn>", "<turn|>", "<|think|>", "<|channel>", "<channel|>", "<|tool>", "<tool|>",
                  "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>',
                  "<|image|>", "<|audio|>", "<|video|>"]
FAMILIES["gemma4"] = dict(FAMILIES["gemma3"],
                          head=FAMILIES["gemma3"]["head"][:6] + _GEMMA4_TOKENS,
                          specials=FAMILIES["gemma3"]["specials"][:6] + _GEMMA4_TOKENS)

# Corpus ----------------------------------------------------------------------


def default_corpus(limit_bytes=3_000_000):
    """Deterministic multilingual + code text from what a Debian box has."""
    texts, size = [], 0
    try:
        import gettext
        files = sorted(glob.glob("/usr/share/locale/*/LC_MESSAGES/*.mo"))
        random.Random(0).shuffle(files)
        for f in files:
            try:
                cat = gettext.GNUTranslations(open(f, "rb"))._catalog
            except Exception:
                continue
            for k, v in cat.items():
                if v and k:
                    texts.append(v)
                    size += len(v.encode())
            if size > limit_bytes * 0.6:
                break
    except Exception:
        pass
    for f in sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py"))):
        s = open(f, encoding="utf-8", errors="replace").read()
        texts.append(s)
        size += len(s.encode())
        if size > limit_bytes:
            break
    if size < 10_000:  # fallback: the test strings themselves, repeated
        texts = BASE_TESTS * 200
    return texts


def iter_lines(texts):
    for t in texts:
        for line in t.split("\n"):
            yield line + "\n"


# Builders ----------------------------------------------------------------------


def build_bytelevel(fam, texts):
    tok = Tokenizer(models.BPE())
    if fam["normalizer"] == "NFC":
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = byte_level_pre(fam["regex"], fam["trim_offsets"])
    trainer = trainers.BpeTrainer(vocab_size=fam["vocab"], min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator(iter_lines(texts), trainer=trainer)
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    if fam.get("specials_first"):
        # Tekken layout: the special tokens own ids 0..N-1 and are also in the model vocab
        n = len(fam["specials"])
        vocab = {k: v + n for k, v in vocab.items()}
        for i, s in enumerate(fam["specials"]):
            vocab[s] = i
    j["model"]["vocab"] = vocab
    j["model"]["ignore_merges"] = fam["ignore_merges"]
    j["model"]["byte_fallback"] = False
    j["model"]["fuse_unk"] = False
    j["model"]["unk_token"] = None
    j["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    # llama3 additionally gets a BOS TemplateProcessing in finish_post_processor()
    j["post_processor"] = {"type": "ByteLevel", "add_prefix_space": fam["name"] == "llama3",
                           "trim_offsets": False, "use_regex": fam["name"] == "llama3"}
    if fam["name"] != "llama3":
        j["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                        "use_regex": False}
    tok = Tokenizer.from_str(json.dumps(j))
    add_tokens(tok, fam)
    return finish_post_processor(tok, fam)


def build_spm(fam, texts):
    """SentencePiece-style BPE (byte_fallback) in the converted tokenizer.json shape.

    Merges are learned word-by-word (Metaspace split) like SentencePiece's
    split_by_whitespace, then the pipeline is swapped for the converted one.
    """
    flavour = fam["flavour"]
    tok = Tokenizer(models.BPE(unk_token=fam["unk"], fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="\u2581", prepend_scheme="always" if flavour == "llama_legacy" else "never", split=True)
    # split_digits: SentencePiece Llama/Mistral/Gemma never merge digits
    tok.pre_tokenizer = pre_tokenizers.Sequence([tok.pre_tokenizer, pre_tokenizers.Digits(individual_digits=True)])
    head = list(fam["head"]) + BYTE_TOKENS
    trainer = trainers.BpeTrainer(vocab_size=fam["vocab"], min_frequency=2, show_progress=False,
                                  special_tokens=head, limit_alphabet=400)
    tok.train_from_iterator(iter_lines(texts), trainer=trainer)
    j = json.loads(tok.to_str())
    # byte tokens are plain vocab entries in real files, not added tokens
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] not in BYTE_TOKENS]
    if flavour == "gemma":
        # GemmaConverter: a literal "\t" piece replaces <0x09> when the vocab lacks one
        v = j["model"]["vocab"]
        if "\t" not in v:
            v["\t"] = v.pop("<0x09>")
    if flavour == "llama_legacy":
        j["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
        j["pre_tokenizer"] = None
        j["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    else:  # gemma
        j["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
        j["pre_tokenizer"] = {"type": "Split", "pattern": {"String": " "},
                              "behavior": "MergedWithPrevious", "invert": False}
        j["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]}
    j["model"]["ignore_merges"] = False
    j["model"]["dropout"] = None
    tok = Tokenizer.from_str(json.dumps(j))
    add_tokens(tok, fam)
    return finish_post_processor(tok, fam)


def add_tokens(tok, fam):
    for s in fam["specials"]:
        tok.add_special_tokens([AddedToken(s, special=True, normalized=False, lstrip=False,
                                           rstrip=False, single_word=False)])
    for s in fam["nonspecial"]:
        if tok.token_to_id(s) is None or fam["kind"] == "spm":
            tok.add_tokens([AddedToken(s, special=False, normalized=False)])


def finish_post_processor(tok, fam):
    j = json.loads(tok.to_str())
    bos = fam.get("bos")
    if fam["name"] == "llama3":
        j["post_processor"] = {"type": "Sequence", "processors": [
            j["post_processor"],
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {bos: {"id": bos, "ids": [tok.token_to_id(bos)], "tokens": [bos]}}}]}
    elif fam["kind"] == "spm":
        bid = tok.token_to_id(bos)
        j["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bid], "tokens": [bos]}}}
    return Tokenizer.from_str(json.dumps(j))


# Checks --------------------------------------------------------------------------


def tests_for(fam):
    extra = []
    for s in fam["specials"][:4] + fam["nonspecial"][:3]:
        extra += [f"text {s} more", f"{s}start", f"end{s}", f"  {s}  spaced", f"{s}{s}"]
    if fam["name"] == "llama3":
        extra.append("<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>")
    if fam["name"] == "qwen3":
        extra.append("<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nOk<|im_end|>")
    if fam["name"].startswith("mistral") or fam["name"].startswith("llama2"):
        extra.append("<s>[INST] Hi! [/INST] Ok</s>[INST] again [/INST]")
    if fam["name"] == "gemma3":
        extra.append("<bos><start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\nOk<end_of_turn>\n")
    if fam["name"] == "gemma4":
        extra.append("<bos><|turn>user\nHi!<turn|>\n<|turn>model\n<|channel>thought\n<channel|>Ok<turn|>\n")
        extra.append('<|tool_call>call:f{a:<|"|>x<|"|>}<tool_call|><|image|>')
    return BASE_TESTS + extra


def split_added(text, added):
    """Leftmost-longest split of text at added-token contents -> [(segment, is_token)]."""
    out, i, start = [], 0, 0
    by_len = sorted(added, key=len, reverse=True)
    while i < len(text):
        m = next((a for a in by_len if a and text.startswith(a, i)), None)
        if m:
            if start < i:
                out.append((text[start:i], False))
            out.append((m, True))
            i += len(m)
            start = i
        else:
            i += 1
    if start < len(text):
        out.append((text[start:], False))
    return out


def expected_roundtrip(fam, text, tok):
    """What decode(encode(text)) should give for this family (documented lossiness).

    byte-level: exact (Qwen: after NFC).  SentencePiece-style: a literal U+2581 in the
    text comes back as a space; legacy Prepend adds a space to every non-token segment
    and the Strip decoder removes only the first leading space of the whole output.
    """
    t = text
    if fam.get("normalizer") == "NFC":
        t = unicodedata.normalize("NFC", t)
    if fam["kind"] != "spm":
        return t
    added = fam["specials"] + fam["nonspecial"]
    segs = split_added(t, added)
    parts = []
    for seg, is_tok in segs:
        if is_tok:
            parts.append(seg)
        else:
            seg = seg.replace("\u2581", " ")
            parts.append((" " + seg) if fam["flavour"] == "llama_legacy" else seg)
    out = "".join(parts)
    if fam["flavour"] == "llama_legacy" and out.startswith(" "):
        out = out[1:]
    return out


def check(fam, tok, outdir):
    problems = []
    path = os.path.join(outdir, "tokenizer.json")
    tok2 = Tokenizer.from_file(path)
    tests = tests_for(fam)
    golden = []
    rt_fail = 0
    for t in tests:
        e1 = tok.encode(t, add_special_tokens=False)
        e2 = tok2.encode(t, add_special_tokens=False)
        if e1.ids != e2.ids:
            problems.append(f"reload mismatch on {t!r}")
        es = tok2.encode(t, add_special_tokens=True)
        golden.append({"text": t, "ids": e2.ids, "ids_special": es.ids, "tokens": e2.tokens})
        dec = tok2.decode(e2.ids, skip_special_tokens=False)
        exp = expected_roundtrip(fam, t, tok2)
        if dec != exp:
            rt_fail += 1
            if rt_fail <= 3:
                problems.append(f"roundtrip differs: {t!r} -> {dec!r}")
    with open(os.path.join(outdir, "golden.jsonl"), "w", encoding="utf-8") as f:
        for g in golden:
            f.write(json.dumps(g, ensure_ascii=False) + "\n")
    return tests, rt_fail, problems


def check_transformers(fam, outdir, tests, tok):
    try:
        from transformers import AutoTokenizer
    except Exception as e:  # transformers is optional
        return f"transformers not importable: {e}"
    try:
        at = AutoTokenizer.from_pretrained(outdir, local_files_only=True)
    except Exception as e:
        return f"AutoTokenizer failed: {type(e).__name__}: {e}"
    diff_plain, diff_special, first = 0, 0, None
    for t in tests:
        a = at(t, add_special_tokens=False)["input_ids"]
        b = tok.encode(t, add_special_tokens=False).ids
        if a != b:
            diff_plain += 1
            first = first or (t, a[:12], b[:12])
        a2 = at(t, add_special_tokens=True)["input_ids"]
        b2 = tok.encode(t, add_special_tokens=True).ids
        if a2 != b2:
            diff_special += 1
            first = first or (t, a2[:12], b2[:12])
    return (f"{type(at).__name__}: {diff_plain}/{len(tests)} differ (plain), "
            f"{diff_special}/{len(tests)} differ (add_special_tokens=True)"
            + (f"; first: {first!r}" if first else ""))


def write_family(fam, texts, outdir):
    """Trains the stand-in of `fam` and writes tokenizer.json, tokenizer_config.json and
    config.json to outdir; returns the tokenizer."""
    os.makedirs(outdir, exist_ok=True)
    tok = build_bytelevel(fam, texts) if fam["kind"] == "bytelevel" else build_spm(fam, texts)
    tok.save(os.path.join(outdir, "tokenizer.json"))
    if fam.get("merges_format") == "strings":
        # tokenizers >= 0.20 always writes [a, b] pairs; real Llama-3 files still carry
        # legacy "a b" strings, so rewrite them to exercise that loader path too.
        pj = os.path.join(outdir, "tokenizer.json")
        j = json.load(open(pj, encoding="utf-8"))
        j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
        json.dump(j, open(pj, "w", encoding="utf-8"), ensure_ascii=False)
    cfg = dict(fam["tok_config"])
    cfg["model_max_length"] = 131072
    json.dump(cfg, open(os.path.join(outdir, "tokenizer_config.json"), "w"), indent=1)
    json.dump({"model_type": fam["model_type"], "vocab_size": tok.get_vocab_size()},
              open(os.path.join(outdir, "config.json"), "w"), indent=1)
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tok_standins")
    ap.add_argument("--corpus", nargs="*", default=None)
    ap.add_argument("--families", nargs="*", default=list(FAMILIES))
    ap.add_argument("--no-transformers", action="store_true")
    args = ap.parse_args()
    if args.corpus:
        texts = [open(p, encoding="utf-8", errors="replace").read() for p in args.corpus]
    else:
        texts = default_corpus()
    ok = True
    for name in args.families:
        fam = dict(FAMILIES[name], name=name)
        outdir = os.path.join(args.out, name)
        tok = write_family(fam, texts, outdir)
        tests, rt_fail, problems = check(fam, tok, outdir)
        line = f"[{name}] vocab={tok.get_vocab_size()} tests={len(tests)} roundtrip_fail={rt_fail}"
        print(line)
        for p in problems:
            print("   ", p)
        if not args.no_transformers:
            print("    transformers:", check_transformers(fam, outdir, tests, tok))
        ok = ok and not any(p.startswith("reload") for p in problems)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
