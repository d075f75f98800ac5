"""A LoRA training run with transformers + peft (+ bitsandbytes for NF4) that qtrain's trainer
must reproduce: the same base, the same initial adapter, every row in every step (so no data
order enters), AdamW, a cosine schedule with warmup and gradient clipping as the HF Trainer does
them, float32, no dropout. Prints the per-step losses as JSON. With LORAPLUS_RATIO the optimizer
is peft's create_loraplus_optimizer (LoRA+: lora_B at that ratio times LR) over the same AdamW.

    python scripts/reference/train_reference.py BASE_DIR ADAPTER_DIR DATA.jsonl QUANT STEPS LR WARMUP [LORAPLUS_RATIO]
"""

import json
import os
import sys

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch
import bnb_oracle  # noqa: F401 (bitsandbytes, the same on every CPU: see Note [bitsandbytes' CPU defects])
from peft import PeftModel
from peft.optimizers import create_loraplus_optimizer
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, get_cosine_schedule_with_warmup


def load_peft_model(base_dir, adapter_dir, quant):
    """The base in float32 (NF4 with double quantization where quant is nf4, bitsandbytes' generic
    path) with the adapter of adapter_dir, trainable."""
    kwargs = dict(dtype=torch.float32, device_map="cpu")
    if quant == "nf4":
        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                           bnb_4bit_use_double_quant=True,
                                                           bnb_4bit_compute_dtype=torch.float32)
    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir, **kwargs), adapter_dir,
                                     is_trainable=True)


def main():
    base_dir, adapter_dir, data_path, quant = sys.argv[1:5]
    steps, lr, warmup = int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
    model = load_peft_model(base_dir, adapter_dir, quant)
    model.train()
    rows = [json.loads(line) for line in open(data_path) if line.strip()]
    width = max(len(r["input_ids"]) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r["input_ids"])] = torch.tensor(r["input_ids"])
        labels[i, :len(r["labels"])] = torch.tensor(r["labels"])
    params = [p for p in model.parameters() if p.requires_grad]
    if len(sys.argv) > 8:
        opt = create_loraplus_optimizer(model, torch.optim.AdamW, lr=lr, loraplus_lr_ratio=float(sys.argv[8]),
                                        betas=(0.9, 0.999), eps=1e-8, foreach=False)
    else:
        opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, foreach=False)
    sched = get_cosine_schedule_with_warmup(opt, warmup, steps)
    losses = []
    for _ in range(steps):
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=False)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    print(json.dumps(losses))


if __name__ == "__main__":
    main()
