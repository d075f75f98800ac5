"""What axolotl + transformers 5.23 make of the axolotl settings qtrain reads, for
tests/engine/train/axolotl_settings_test.cpp.

intervals: for each case (per_epoch, num_epochs, total_steps), the eval and save intervals.
  axolotl (src/axolotl/utils/config/__init__.py, normalize_config) turns saves_per_epoch /
  evals_per_epoch into the fraction 1 / (n * num_epochs) when it is below 1, and leaves the keys
  unset otherwise (then save_strategy "epoch", eval_strategy "no"); transformers'
  TrainerState.compute_steps turns a fraction into steps. Printed: eval_steps (0: no evaluation)
  and save_steps (0 with save_strategy "epoch": "epoch").

special: the tokenizer of --tokenizer after axolotl's special_tokens handling
  (src/axolotl/loaders/tokenizer.py: tokenizer.add_special_tokens({role: AddedToken(token,
  rstrip=False, lstrip=False, normalized=False)}) per role), and the ids of an alpaca sample
  (the --prompt with the post-processor's tokens, the --output without, then eos_token_id, as
  axolotl's alpaca strategy appends the tokenizer's EOS).

    python scripts/reference/axolotl_settings_reference.py intervals --cases 4,1,10 1,1,7 --out F
    python scripts/reference/axolotl_settings_reference.py special --tokenizer DIR \
        --tokens '{"eos_token": "<|end_of_text|>"}' --prompt "..." --output "..." --out F
"""

import argparse
import json


def intervals(cases):
    from transformers import TrainingArguments
    from transformers.trainer_callback import TrainerState

    out = []
    for per_epoch, num_epochs, total in cases:
        fraction = 1.0 / (per_epoch * num_epochs)
        kwargs = {"output_dir": "/tmp/unused", "report_to": []}
        if fraction < 1.0:
            kwargs.update(save_strategy="steps", save_steps=fraction, eval_strategy="steps", eval_steps=fraction)
        else:
            kwargs.update(save_strategy="epoch", eval_strategy="no")
        args = TrainingArguments(**kwargs)
        state = TrainerState()
        state.compute_steps(args, total)
        steps = args.save_strategy == "steps"
        out.append({"per_epoch": per_epoch, "num_epochs": num_epochs, "total_steps": total,
                    "eval_steps": state.eval_steps if steps else 0,
                    "save_steps": state.save_steps if steps else "epoch"})
    return out


def special(tokenizer_dir, tokens, prompt, output):
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    for role, token in tokens.items():
        tokenizer.add_special_tokens({role: AddedToken(token, rstrip=False, lstrip=False, normalized=False)})
    return {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id,
            "eos_token": tokenizer.eos_token, "bos_token": tokenizer.bos_token,
            "vocab_size": len(tokenizer),
            "ids": tokenizer(prompt)["input_ids"] + tokenizer(output, add_special_tokens=False)["input_ids"]
            + [tokenizer.eos_token_id]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["intervals", "special"])
    parser.add_argument("--cases", nargs="*", default=[])
    parser.add_argument("--tokenizer")
    parser.add_argument("--tokens", default="{}")
    parser.add_argument("--prompt", default="")
    parser.add_argument("--output", default="")
    parser.add_argument("--out", required=True)
    a = parser.parse_args()
    if a.mode == "intervals":
        result = intervals([tuple(int(x) for x in case.split(",")) for case in a.cases])
    else:
        result = special(a.tokenizer, json.loads(a.tokens), a.prompt, a.output)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
