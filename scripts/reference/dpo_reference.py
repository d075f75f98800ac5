"""A DPO run with TRL's DPOTrainer (transformers + peft + bitsandbytes for NF4) that qtrain's
`rl: dpo` must reproduce: the same base, the same starting adapter (B = 0, so the reference, the
base with the adapter off, is where training starts), the same pre-tokenized pairs, every pair in
every step (so no data order enters), AdamW with a cosine schedule, warmup and clipping as the HF
Trainer does them, float32. Prints the log of every step (loss and TRL's metrics) as JSON.

    python scripts/reference/dpo_reference.py BASE_DIR ADAPTER_DIR PAIRS.jsonl TOKENIZER_DIR QUANT STEPS LR WARMUP BETA LOSS MAX_LENGTH

TOKENIZER_DIR only gives DPOTrainer a processing class: the pairs are already token ids, so
dataset preparation (which would tokenize text) is skipped and the collator pads with id 0.
"""

import json
import os
import sys
import tempfile

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch
import bnb_oracle  # noqa: F401 (bitsandbytes, the same on every CPU: see Note [bitsandbytes' CPU defects])
from datasets import Dataset
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig
from trl import DPOConfig, DPOTrainer
from trl.trainer.dpo_trainer import DataCollatorForPreference


def main():
    base_dir, adapter_dir, pairs_path, tokenizer_dir, quant = sys.argv[1:6]
    steps, lr, warmup = int(sys.argv[6]), float(sys.argv[7]), int(sys.argv[8])
    beta, loss_type, max_length = float(sys.argv[9]), sys.argv[10], int(sys.argv[11])
    kwargs = dict(dtype=torch.float32, device_map="cpu")
    if quant == "nf4":
        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                           bnb_4bit_use_double_quant=True,
                                                           bnb_4bit_compute_dtype=torch.float32)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir, **kwargs), adapter_dir,
                                      is_trainable=True)
    rows = [json.loads(line) for line in open(pairs_path) if line.strip()]
    dataset = Dataset.from_list(rows)
    DPOTrainer._prepare_dataset = lambda self, dataset, *args, **kw: dataset  # already token ids
    with tempfile.TemporaryDirectory() as out:
        args = DPOConfig(output_dir=out, per_device_train_batch_size=len(rows), gradient_accumulation_steps=1,
                         max_steps=steps, learning_rate=lr, lr_scheduler_type="cosine", warmup_steps=warmup,
                         max_grad_norm=1.0, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
                         logging_steps=1, beta=beta, loss_type=[loss_type], max_length=max_length,
                         truncation_mode="keep_start", report_to=[], use_cpu=True, bf16=False, fp16=False,
                         gradient_checkpointing=False, save_strategy="no", seed=3, dataloader_drop_last=False,
                         remove_unused_columns=False)
        trainer = DPOTrainer(model=model, args=args, train_dataset=dataset,
                             processing_class=AutoTokenizer.from_pretrained(tokenizer_dir),
                             data_collator=DataCollatorForPreference(pad_token_id=0, max_length=max_length))
        trainer.train()
        logs = [h for h in trainer.state.log_history if "loss" in h and "train_runtime" not in h]
    print(json.dumps(logs))


if __name__ == "__main__":
    main()
