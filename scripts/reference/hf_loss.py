"""Mean loss of a Hugging Face model folder as transformers computes it (float32, CPU), on the
"ids" and "labels" of a safetensors file. A bitsandbytes pre-quantized folder loads quantized.

    python scripts/reference/hf_loss.py MODEL_DIR INPUTS.safetensors

Prints the loss.
"""

import os
import sys

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch
import bnb_oracle  # noqa: F401 (bitsandbytes, the same on every CPU: see Note [bitsandbytes' CPU defects])
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main():
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32, device_map="cpu").eval()
    inputs = load_file(sys.argv[2])
    with torch.no_grad():
        print(model(input_ids=inputs["ids"], labels=inputs["labels"]).loss.item())


if __name__ == "__main__":
    main()
