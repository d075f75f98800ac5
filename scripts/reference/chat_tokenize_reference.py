"""What transformers 5.23's apply_chat_template(tokenize=True) gives for conversations, one per
line, for the `qtrain tokenize --chat` parity test (tests/apps/commands_test.cpp).

    python scripts/reference/chat_tokenize_reference.py --data conversations.jsonl --out ids.json \
        --run TOKENIZER_DIR[=TEMPLATE_FILE] [--run ...]

Each input line is a list of messages or {"messages": [...], "tools": [...]}. Each run renders
with TEMPLATE_FILE, or without one with the tokenizer's own template, with add_generation_prompt
false and true. Output: [{"run": "DIR[=FILE]", "add_generation_prompt": bool, "ids": [[...], ...]}]
(one list of ids per input line), runs in order, false before true.
"""

import argparse
import json

from transformers import AutoTokenizer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--run", action="append", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with open(args.data, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    results = []
    for run in args.run:
        directory, _, template_file = run.partition("=")
        tokenizer = AutoTokenizer.from_pretrained(directory)
        template = None
        if template_file:
            with open(template_file, encoding="utf-8") as f:
                template = f.read()
        for prompt in (False, True):
            ids = []
            for row in rows:
                messages, tools = (row["messages"], row.get("tools")) if isinstance(row, dict) else (row, None)
                ids.append(
                    list(
                        tokenizer.apply_chat_template(
                            messages,
                            tools=tools,
                            chat_template=template,
                            add_generation_prompt=prompt,
                            tokenize=True,
                            return_dict=False,
                        )
                    )
                )
            results.append({"run": run, "add_generation_prompt": prompt, "ids": ids})
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
