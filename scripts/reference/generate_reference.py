"""Greedy generation as transformers + peft do it (float32, CPU), for qtrain's generate tests.

    python scripts/reference/generate_reference.py SETTINGS.json OUT.json

SETTINGS.json: {"cases": [{"base": DIR, "adapter": DIR or null, "quant": "fp32" | "nf4" | "int8",
"prompts": [[ids], ...], "max_new_tokens": N, "stop_ids": [ids]}, ...]}. The bases load as
model_reference.py loads them (bitsandbytes' generic CPU path through bnb_oracle; INT8 with the
exact rescale). Each prompt is generated alone with model.generate(do_sample=False); OUT.json
holds {"cases": [{"sequences": [[new ids], ...], "scores": [[[logits of each step], ...], ...]},
...]}.
"""

import json
import os
import sys

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
from model_reference import load, register_exact_int8_rescale


def generate(case):
    model = load(case["base"], case["quant"])
    if case.get("adapter"):
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, case["adapter"])
    model.eval()
    result = {"sequences": [], "scores": []}
    for prompt in case["prompts"]:
        ids = torch.tensor([prompt], dtype=torch.long)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=case["max_new_tokens"], eos_token_id=case["stop_ids"],
                                 pad_token_id=case["stop_ids"][0], temperature=None, top_p=None, top_k=None,
                                 output_scores=True, return_dict_in_generate=True)
        result["sequences"].append(out.sequences[0, ids.shape[1]:].tolist())
        result["scores"].append([step[0].tolist() for step in out.scores])
    return result


def main():
    settings_path, out_path = sys.argv[1:3]
    register_exact_int8_rescale()  # only bitsandbytes' INT8 product reads it
    cases = json.load(open(settings_path))["cases"]
    json.dump({"cases": [generate(c) for c in cases]}, open(out_path, "w"))


if __name__ == "__main__":
    main()
