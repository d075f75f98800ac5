"""axolotl's `type: input_output` samples made with transformers 5.23, for qtrain's parity test
(tests/engine/data/chat_dataset_test.cpp).

As axolotl's RawInputOutputStrategy.tokenize_prompt (axolotl 067b021c,
src/axolotl/prompt_strategies/input_output.py): each segment's text is tokenized on its own with
add_special_tokens=False and appended; its tokens are labels when the segment's "label" is true or
train_on_inputs, else -100. No BOS or EOS is added: the segments carry them.

    python scripts/reference/input_output_reference.py --tokenizer DIR --data rows.jsonl \
        --out samples.jsonl [--train-on-inputs]

Output: one {"input_ids": [...], "labels": [...]} per input row.
"""

import argparse
import json

from transformers import AutoTokenizer


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--train-on-inputs", action="store_true")
    args = p.parse_args()
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    with open(args.data, encoding="utf-8") as f, open(args.out, "w", encoding="utf-8") as out:
        for line in f:
            if not line.strip():
                continue
            input_ids, labels = [], []
            for segment in json.loads(line)["segments"]:
                ids = tok(segment["text"], add_special_tokens=False)["input_ids"]
                input_ids += ids
                labels += ids if segment["label"] or args.train_on_inputs else [-100] * len(ids)
            out.write(json.dumps({"input_ids": input_ids, "labels": labels}) + "\n")


if __name__ == "__main__":
    main()
