"""Checks a GGUF LoRA file against GGUF files of the base and of the merged model, for qtrain's
export tests: for every tensor pair "<name>.lora_a" / "<name>.lora_b" it holds, merged <name>
must equal base <name> + (alpha / r) * lora_b @ lora_a, llama.cpp's reading of the file.

    python scripts/reference/gguf_lora_check.py BASE.gguf MERGED.gguf LORA.gguf OUT.json

All three F32. OUT.json: {"general_type", "adapter_type", "alpha", "pairs", "max_rel",
"unmatched": [names of LORA without a base tensor]}.
"""

import json
import sys

import numpy as np
from gguf import GGUFReader


def tensors(path):
    reader = GGUFReader(path)
    return reader, {t.name: np.asarray(t.data, dtype=np.float32) for t in reader.tensors}


def main():
    base_path, merged_path, lora_path, out_path = sys.argv[1:5]
    _, base = tensors(base_path)
    _, merged = tensors(merged_path)
    reader, lora = tensors(lora_path)
    alpha = float(reader.fields["adapter.lora.alpha"].contents())
    worst, pairs, unmatched = 0.0, 0, []
    for name in sorted(n[: -len(".lora_a")] for n in lora if n.endswith(".lora_a")):
        a, b = lora[name + ".lora_a"], lora[name + ".lora_b"]
        if name not in base:
            unmatched.append(name)
            continue
        rebuilt = base[name] + (alpha / a.shape[0]) * (b.astype(np.float64) @ a.astype(np.float64))
        worst = max(worst, float(np.abs(rebuilt - merged[name]).max() / np.abs(merged[name]).max()))
        pairs += 1
    json.dump({"general_type": reader.fields["general.type"].contents(),
               "adapter_type": reader.fields["adapter.type"].contents(), "alpha": alpha, "pairs": pairs,
               "max_rel": worst, "unmatched": unmatched}, open(out_path, "w"))


if __name__ == "__main__":
    main()
