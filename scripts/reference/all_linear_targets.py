"""What peft's target_modules="all-linear" adapts on each of some base models (float32, r 4,
lora_alpha 8): the adapter's tensors as save_pretrained names them, with their shapes, and the
config peft resolves it to (target_modules, target_parameters, rank_pattern, alpha_pattern).

    python scripts/reference/all_linear_targets.py OUT.json BASE_DIR...

OUT.json maps each BASE_DIR to {"tensors": {name: shape}, "target_modules": [...],
"target_parameters": [...], "rank_pattern": {...}, "alpha_pattern": {...}}, lists sorted. Used
by the tests to check that qtrain's lora_target_linear adapts the same modules and parameters.
"""

import json
import os
import sys

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
from transformers import AutoModelForCausalLM


def main():
    out_file, bases = sys.argv[1], sys.argv[2:]
    out = {}
    for base in bases:
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
        config = peft_model.peft_config["default"]
        out[base] = {
            "tensors": {k: list(v.shape) for k, v in get_peft_model_state_dict(peft_model).items()},
            "target_modules": sorted(config.target_modules or []),
            "target_parameters": sorted(config.target_parameters or []),
            "rank_pattern": dict(config.rank_pattern or {}),
            "alpha_pattern": dict(config.alpha_pattern or {}),
        }
    with open(out_file, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
