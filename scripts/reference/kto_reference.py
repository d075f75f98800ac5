"""A KTO run with TRL 1.16's KTOTrainer (transformers + peft + bitsandbytes for NF4) that qtrain's
`rl: kto` must reproduce: the same base, the same starting adapter (B = 0, so the reference, the
base with the adapter off, is where training starts), the same rows in file order (KTOTrainer's
sequential sampler), AdamW with a cosine schedule, warmup and clipping as the HF Trainer does
them, float32. Prints the log of every step (loss and TRL's metrics) as JSON.

    python scripts/reference/kto_reference.py BASE_DIR ADAPTER_DIR ROWS.jsonl TOKENIZER_DIR QUANT STEPS LR WARMUP \
        BETA MAX_LENGTH BATCH ACCUMULATION DESIRABLE_WEIGHT UNDESIRABLE_WEIGHT [--eval EVAL_ROWS.jsonl EVAL_STEPS] \
        [--precompute N]

ROWS.jsonl holds token ids ("prompt_ids", "completion_ids", "label"), which KTOTrainer does not read:
each row is given to it as text, the ids written out as numbers, and its tokenizer call (_tokenize)
reads them back, so that every other step of its dataset preparation runs as it is: the EOS text
it appends to a completion is read as nothing (the ids are the whole row), the rows whose prompt
fills MAX_LENGTH are dropped, and the KL completions are made by its own rotation in runs of
BATCH rows. TOKENIZER_DIR only gives the trainer a processing class. With --precompute N the
reference log-probabilities of the rows and their KL rows are computed before training, N rows at a
time (precompute_ref_log_probs, precompute_ref_batch_size). --loss-type gives KTOConfig's loss_type
(kto, apo_zero_unpaired).
"""

import json
import os
import sys
import tempfile

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import trl.trainer.kto_trainer as kto_trainer
from datasets import Dataset
from preference_reference import pop_option, precompute_options, step_logs
from train_reference import load_peft_model  # the same base and adapter as the supervised oracle's
from transformers import AutoTokenizer
from trl import KTOConfig, KTOTrainer


def ids_of_text(processing_class, text, **kwargs):
    """KTOTrainer's tokenizer call on text that holds token ids as numbers."""
    return {"input_ids": [int(t) for t in text.replace(processing_class.eos_token, " ").split()]}


def as_text(row):
    return {"prompt": " ".join(map(str, row["prompt_ids"])),
            "completion": "".join(" " + str(t) for t in row["completion_ids"]),
            "label": row["label"]}


def main():
    argv, evaluation = pop_option(sys.argv, "--eval", 2)
    eval_dataset, eval_args = None, {}
    if evaluation is not None:
        eval_dataset = Dataset.from_list([as_text(json.loads(line)) for line in open(evaluation[0]) if line.strip()])
        eval_args = dict(eval_strategy="steps", eval_steps=int(evaluation[1]))
    argv, precompute = precompute_options(argv)
    argv, loss_type = pop_option(argv, "--loss-type", 1)
    base_dir, adapter_dir, rows_path, tokenizer_dir, quant = argv[1:6]
    steps, lr, warmup, beta = int(argv[6]), float(argv[7]), int(argv[8]), float(argv[9])
    max_length, batch, accumulation = int(argv[10]), int(argv[11]), int(argv[12])
    desirable_weight, undesirable_weight = float(argv[13]), float(argv[14])
    kto_trainer._tokenize = ids_of_text
    model = load_peft_model(base_dir, adapter_dir, quant)
    dataset = Dataset.from_list([as_text(json.loads(line)) for line in open(rows_path) if line.strip()])
    args = KTOConfig(output_dir="", per_device_train_batch_size=batch, per_device_eval_batch_size=batch,
                     gradient_accumulation_steps=accumulation, max_steps=steps, learning_rate=lr,
                     lr_scheduler_type="cosine", warmup_steps=warmup, max_grad_norm=1.0, weight_decay=0.0,
                     adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, logging_steps=1, beta=beta,
                     desirable_weight=desirable_weight, undesirable_weight=undesirable_weight,
                     max_length=max_length, report_to=[], use_cpu=True, bf16=False, fp16=False,
                     gradient_checkpointing=False, save_strategy="no", seed=3, dataloader_drop_last=False,
                     loss_type="kto" if loss_type is None else loss_type[0], **precompute, **eval_args)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    tokenizer.pad_token = tokenizer.convert_ids_to_tokens(0)  # the tiny model's ids; the padding is masked
    with tempfile.TemporaryDirectory() as out:
        args.output_dir = out
        trainer = KTOTrainer(model=model, args=args, train_dataset=dataset, eval_dataset=eval_dataset,
                             processing_class=tokenizer)
        trainer.train()
        logs = step_logs(trainer)
    print(json.dumps(logs))


if __name__ == "__main__":
    main()
