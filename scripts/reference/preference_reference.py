"""A preference-tuning run with TRL 1.16 (transformers + peft + bitsandbytes for NF4) that qtrain's
`rl:` must reproduce: DPOTrainer for its losses (`sigmoid`, `ipo`, or a comma-separated list of
its loss types), ORPOTrainer for `orpo`, CPOTrainer with loss_type simpo for `simpo`. The same base, the same starting adapter (B = 0, so DPO's reference,
the base with the adapter off, is where training starts), the same pre-tokenized pairs, every pair
in every step (so no data order enters), AdamW with a cosine schedule, warmup and clipping as the
HF Trainer does them, float32. Prints the log of every step (loss and TRL's metrics) as JSON.

    python scripts/reference/preference_reference.py BASE_DIR ADAPTER_DIR PAIRS.jsonl TOKENIZER_DIR QUANT STEPS LR \
        WARMUP BETA LOSS MAX_LENGTH [SIMPO_GAMMA CPO_ALPHA] [--eval EVAL_PAIRS.jsonl EVAL_STEPS]

With --eval the trainer also evaluates EVAL_PAIRS.jsonl (in one batch) every EVAL_STEPS steps, and
the printed log holds those entries (eval_loss and the eval_ metrics) too. With --precompute N
(DPO and IPO) the reference log-probabilities are computed before training, N pairs at a time
(precompute_ref_log_probs, precompute_ref_batch_size). With DPO's losses, --loss-weights W1,W2,...
gives their loss_weights, --label-smoothing EPS the label_smoothing, --f-divergence TYPE COEF the
f_divergence_type and f_alpha_divergence_coef, --ld-alpha A the ld_alpha, and --use-weighting sets
use_weighting.

TOKENIZER_DIR only gives the trainer a processing class: the pairs are already token ids, so
dataset preparation (which would tokenize text) is skipped and the collator pads with id 0.
"""

import json
import os
import sys
import tempfile

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

from datasets import Dataset
from train_reference import load_peft_model  # the same base and adapter as the supervised oracle's
from transformers import AutoTokenizer
from trl import DPOConfig, DPOTrainer
from trl.experimental.cpo import CPOConfig, CPOTrainer
from trl.experimental.orpo import ORPOConfig, ORPOTrainer
from trl.experimental.utils import DPODataCollatorWithPadding
from trl.trainer.dpo_trainer import DataCollatorForPreference


def tokenized_row(trainer, feature, *args, **kwargs):
    """ORPOTrainer's and CPOTrainer's tokenize_row for rows that are token ids already."""
    prompt = feature["prompt_ids"]
    row = {"prompt_input_ids": prompt, "prompt_attention_mask": [1] * len(prompt)}
    for side in ["chosen", "rejected"]:
        completion = feature[f"{side}_ids"]
        row[f"{side}_input_ids"] = prompt + completion
        row[f"{side}_attention_mask"] = [1] * (len(prompt) + len(completion))
        row[f"{side}_labels"] = [-100] * len(prompt) + completion
    return row


def pop_option(argv, name, count):
    """argv without the option `name` and its `count` values, and those values (None without it)."""
    if name not in argv:
        return argv, None
    at = argv.index(name)
    return argv[:at] + argv[at + 1 + count:], argv[at + 1:at + 1 + count]


def precompute_options(argv):
    """argv without --precompute N, and the trainer's options for it."""
    argv, values = pop_option(argv, "--precompute", 1)
    return argv, {} if values is None else dict(precompute_ref_log_probs=True,
                                                precompute_ref_batch_size=int(values[0]))


def step_logs(trainer):
    """The trainer's log of every step and evaluation, without the run's summary."""
    return [h for h in trainer.state.log_history if ("loss" in h or "eval_loss" in h) and "train_runtime" not in h]


def main():
    argv, evaluation = pop_option(sys.argv, "--eval", 2)
    eval_dataset, eval_args = None, {}
    if evaluation is not None:
        eval_rows = [json.loads(line) for line in open(evaluation[0]) if line.strip()]
        eval_dataset = Dataset.from_list(eval_rows)
        eval_args = dict(eval_strategy="steps", eval_steps=int(evaluation[1]),
                         per_device_eval_batch_size=len(eval_rows))
    argv, precompute = precompute_options(argv)
    argv, weights = pop_option(argv, "--loss-weights", 1)
    argv, smoothing = pop_option(argv, "--label-smoothing", 1)
    argv, divergence = pop_option(argv, "--f-divergence", 2)
    argv, ld_alpha = pop_option(argv, "--ld-alpha", 1)
    argv, weighting = pop_option(argv, "--use-weighting", 0)
    dpo_args = dict(loss_weights=None if weights is None else [float(w) for w in weights[0].split(",")],
                    label_smoothing=0.0 if smoothing is None else float(smoothing[0]),
                    ld_alpha=None if ld_alpha is None else float(ld_alpha[0]),
                    use_weighting=weighting is not None)
    if divergence is not None:
        dpo_args.update(f_divergence_type=divergence[0], f_alpha_divergence_coef=float(divergence[1]))
    sys.argv = argv
    base_dir, adapter_dir, pairs_path, tokenizer_dir, quant = sys.argv[1:6]
    steps, lr, warmup = int(sys.argv[6]), float(sys.argv[7]), int(sys.argv[8])
    beta, loss_type, max_length = float(sys.argv[9]), sys.argv[10], int(sys.argv[11])
    model = load_peft_model(base_dir, adapter_dir, quant)
    rows = [json.loads(line) for line in open(pairs_path) if line.strip()]
    dataset = Dataset.from_list(rows)
    common = dict(per_device_train_batch_size=len(rows), gradient_accumulation_steps=1, max_steps=steps,
                  learning_rate=lr, lr_scheduler_type="cosine", warmup_steps=warmup, max_grad_norm=1.0,
                  weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, logging_steps=1,
                  beta=beta, max_length=max_length, report_to=[], use_cpu=True, bf16=False, fp16=False,
                  gradient_checkpointing=False, save_strategy="no", seed=3, dataloader_drop_last=False,
                  remove_unused_columns=False, **eval_args)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    with tempfile.TemporaryDirectory() as out:
        if loss_type not in ["orpo", "simpo"]:
            DPOTrainer._prepare_dataset = lambda self, dataset, *args, **kw: dataset  # already token ids
            trainer = DPOTrainer(model=model, train_dataset=dataset, eval_dataset=eval_dataset, processing_class=tokenizer,
                                 args=DPOConfig(output_dir=out, loss_type=loss_type.split(","),
                                                truncation_mode="keep_start", **dpo_args, **precompute,
                                                **common),
                                 data_collator=DataCollatorForPreference(pad_token_id=0, max_length=max_length))
        else:
            collator = DPODataCollatorWithPadding(pad_token_id=0)
            if loss_type == "orpo":
                ORPOTrainer.tokenize_row = tokenized_row
                trainer = ORPOTrainer(model=model, train_dataset=dataset, eval_dataset=eval_dataset,
                                      processing_class=tokenizer,
                                      args=ORPOConfig(output_dir=out, padding_value=0, **common),
                                      data_collator=collator)
            else:
                CPOTrainer.tokenize_row = tokenized_row
                simpo_gamma, cpo_alpha = float(sys.argv[12]), float(sys.argv[13])
                trainer = CPOTrainer(model=model, train_dataset=dataset, eval_dataset=eval_dataset,
                                     processing_class=tokenizer,
                                     args=CPOConfig(output_dir=out, loss_type="simpo", simpo_gamma=simpo_gamma,
                                                    cpo_alpha=cpo_alpha, **common),
                                     data_collator=collator)
        trainer.train()
        logs = step_logs(trainer)
    print(json.dumps(logs))


if __name__ == "__main__":
    main()
