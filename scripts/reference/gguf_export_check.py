"""Checks a GGUF file qtrain exported against the Python stack, for qtrain's export tests.

    python scripts/reference/gguf_export_check.py SETTINGS.json OUT.json

SETTINGS.json: {"gguf": FILE, "folder": the HF model folder it was exported from, "adapter": the
PEFT adapter folded in or null, "ids": [[token ids]], "original": a GGUF file llama.cpp's
converter wrote for the same model, or null}. transformers loads FILE (from_pretrained with
gguf_file=, which dequantizes it) and computes the logits of "ids"; the reference is the folder
in float32 with the adapter merged by peft (merge_and_unload). With "original", the tokenizer and
architecture keys of both files and their tensor names and shapes are compared, and transformers'
tokenizer read from FILE must encode a text as the folder's does. OUT.json: {"logits_max_rel",
"kv": {key: [ours, theirs]} for the keys that differ, "missing_keys", "tensor_names_equal",
"shapes_equal", "tokenizer_ids_equal"}.
"""

import json
import os
import sys

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import numpy as np
import torch
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer

TEXT = "Hello world! The capital of France is Paris. 3.14159 élève"


def fields(path):
    reader = GGUFReader(path)
    out = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or not (key.startswith("tokenizer.") or "." in key):
            continue
        value = field.contents()
        if isinstance(value, float):
            value = float(np.float32(value))
        out[key] = value
    return reader, out


def main():
    settings_path, out_path = sys.argv[1:3]
    s = json.load(open(settings_path))
    path = s["gguf"]
    result = {}
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                 dtype=torch.float32).eval()
    reference = AutoModelForCausalLM.from_pretrained(s["folder"], dtype=torch.float32).eval()
    if s.get("adapter"):
        from peft import PeftModel

        reference = PeftModel.from_pretrained(reference, s["adapter"]).merge_and_unload().eval()
    ids = torch.tensor(s["ids"], dtype=torch.long)
    with torch.no_grad():
        ours, theirs = model(input_ids=ids).logits, reference(input_ids=ids).logits
    result["logits_max_rel"] = float((ours - theirs).abs().max() / theirs.abs().max())
    if s.get("original"):
        reader, ours_kv = fields(path)
        original, theirs_kv = fields(s["original"])
        compared = [k for k in theirs_kv if k.startswith("tokenizer.") or k.split(".")[0] == ours_kv.get(
            "general.architecture") and not k.endswith("file_type")]
        result["kv"] = {k: [str(ours_kv.get(k))[:200], str(theirs_kv[k])[:200]] for k in compared
                        if ours_kv.get(k) != theirs_kv[k]}
        result["missing_keys"] = [k for k in compared if k not in ours_kv]
        names = {t.name: [int(d) for d in t.shape] for t in reader.tensors}
        original_names = {t.name: [int(d) for d in t.shape] for t in original.tensors}
        result["tensor_names_equal"] = sorted(names) == sorted(original_names)
        result["shapes_equal"] = names == original_names
        tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
        folder_tokenizer = AutoTokenizer.from_pretrained(s["folder"])
        result["tokenizer_ids_equal"] = tokenizer(TEXT)["input_ids"] == folder_tokenizer(TEXT)["input_ids"]
    json.dump(result, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
