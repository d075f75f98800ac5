"""Logits of a base model with a PEFT adapter, as transformers + peft compute them (float32).

    python scripts/reference/adapter_logits.py BASE_DIR ADAPTER_DIR IDS.safetensors OUT.safetensors

Reads "ids" from IDS.safetensors, writes "logits". Used by the tests to check that an adapter
qtrain wrote means the same thing to peft.
"""

import os
import sys

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch
from peft import PeftModel
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM


def main():
    base_dir, adapter_dir, ids_file, out_file = sys.argv[1:5]
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter_dir).eval()
    with torch.no_grad():
        logits = model(input_ids=load_file(ids_file)["ids"]).logits
    save_file({"logits": logits.contiguous()}, out_file)


if __name__ == "__main__":
    main()
