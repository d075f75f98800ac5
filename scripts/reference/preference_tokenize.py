"""Pairs as TRL 1.16's DPOTrainer prepares them from text or conversation rows, that qtrain's
reading of preference rows (engine/data/preference_rows.h) must reproduce: the prompt extracted
where a row has none, the end-of-sequence text appended to plain-text completions, the prompt and
each prompt + completion tokenized (a conversation through the tokenizer's chat template), and the
completions split off where the tokenized prompt and prompt + completion diverge. Runs the
trainer's own _prepare_dataset; prints one JSON row of prompt_ids, chosen_ids and rejected_ids per
input row.

    python scripts/reference/preference_tokenize.py [--kto] TOKENIZER_DIR ROWS.jsonl [TEMPLATE.jinja]

Each row is prepared on its own (TRL decides text or conversation, and whether to extract the
prompt, from a dataset's first row). TEMPLATE.jinja, where given, is the chat template. With --kto
the rows are KTO's ("prompt", "completion", "label", or pairs, which it unpairs into two rows),
prepared by KTOTrainer._prepare_dataset, and each printed row holds prompt_ids and completion_ids.
"""

import json
import logging
import os
import sys
import tempfile

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
logging.disable(logging.WARNING)

from datasets import Dataset
from transformers import AutoTokenizer
from trl import DPOConfig, DPOTrainer, KTOConfig, KTOTrainer


class _Trainer:
    """What DPOTrainer._prepare_dataset and KTOTrainer._prepare_dataset read of the trainer (KTO's
    KL completions left out: a row's is made at training, qtrain's as TRL's)."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.calculate_KL = False
        self.desirable_weight = self.undesirable_weight = 1.0


def main():
    kto = "--kto" in sys.argv
    argv = [a for a in sys.argv if a != "--kto"]
    tokenizer = AutoTokenizer.from_pretrained(argv[1])
    if len(argv) > 3:
        tokenizer.chat_template = open(argv[3]).read()
    rows = [json.loads(line) for line in open(argv[2]) if line.strip()]
    trainer, config, keys = (KTOTrainer, KTOConfig, ["prompt_ids", "completion_ids"]) if kto else \
        (DPOTrainer, DPOConfig, ["prompt_ids", "chosen_ids", "rejected_ids"])
    with tempfile.TemporaryDirectory() as out:
        args = config(output_dir=out, report_to=[], use_cpu=True)
        for row in rows:
            # KTOTrainer unpairs a pair row into two rows: its chosen one, then its rejected one.
            for prepared in trainer._prepare_dataset(_Trainer(tokenizer), Dataset.from_list([row]), tokenizer, args,
                                                     "train"):
                print(json.dumps({k: prepared[k] for k in keys}))


if __name__ == "__main__":
    main()
