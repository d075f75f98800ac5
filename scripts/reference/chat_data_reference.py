"""axolotl-style `type: chat_template` samples made with transformers 5.23, for qtrain's
chat-dataset parity test (tests/engine/data/chat_dataset_test.cpp).

The rules are those of engine/data/chat_dataset.cpp, Note [Chat labels from character spans]:
render the whole conversation once (apply_chat_template(tokenize=False), no generation prompt),
tokenize once (add_special_tokens=False, return_offsets_mapping=True), then
  1. find each message's content in the rendered text from the end of the previous one
     (verbatim, else stripped of surrounding whitespace);
  2. a turn whose role is in roles_to_train trains every token with at least one character inside
     its content span;
  3. the turn ends at the token after its last content token; within 3 tokens from there the
     first eot token, and separately the first EOS, are trained per train_on_eos: turn (trained turns), all, last (the last turn), none;
  4. a message with empty content trains nothing, not even its end of turn (an empty string is
     found anywhere, so it has no place in the text).
Roles map through `roles` (source -> template role) and then the built-in aliases.

    python scripts/reference/chat_data_reference.py --tokenizer DIR --data rows.jsonl \
        --roles-to-train assistant --train-on-eos turn --out samples.jsonl

Output: one {"input_ids": [...], "labels": [...]} per input row. With --cases ROLES:EOS ...
(e.g. `assistant:turn user,assistant:all`), one tokenizer load serves several settings and --out
is one JSON object {"ROLES:EOS": [{"input_ids", "labels"}, ...], ...}.
"""

import argparse
import json

from transformers import AutoTokenizer

BUILTIN_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                 "system": "system", "tool": "tool"}
EOT_SEARCH = 3


def find_content(text, content, start):
    p = text.find(content, start)
    if p >= 0:
        return p, p + len(content)
    stripped = content.strip(" \t\n\r")
    p = text.find(stripped, start)
    if p < 0:
        raise SystemExit(f"content not found verbatim in the rendering: {content!r}")
    return p, p + len(stripped)


def sample(tok, row, args, eot_ids, eos_id):
    turns = [{"role": BUILTIN_ROLES[m[args.role_key]], "content": m[args.content_key]}
             for m in row[args.field_messages]]
    text = tok.apply_chat_template(turns, tokenize=False, add_generation_prompt=False)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    labels = [-100] * len(ids)
    cursor = 0
    for i, turn in enumerate(turns):
        if not turn["content"]:
            continue  # rule 4: nothing to anchor it to
        begin, end = find_content(text, turn["content"], cursor)
        cursor = end
        train = turn["role"] in args.roles_to_train
        turn_end = 0
        for k, (a, b) in enumerate(offsets):
            inside = a < b and a < end and b > begin
            if inside and train:
                labels[k] = ids[k]
            if inside or (b > a and a < begin):
                turn_end = k + 1
        eos_here = (args.train_on_eos == "all" or (args.train_on_eos == "turn" and train)
                    or (args.train_on_eos == "last" and i + 1 == len(turns)))
        if not eos_here:
            continue
        for wanted in (eot_ids, [eos_id]):
            for k in range(turn_end, min(turn_end + EOT_SEARCH, len(ids))):
                if ids[k] in wanted:
                    labels[k] = ids[k]
                    break
    return {"input_ids": ids, "labels": labels}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--field-messages", default="messages")
    p.add_argument("--role-key", default="role")
    p.add_argument("--content-key", default="content")
    p.add_argument("--roles-to-train", nargs="*", default=["assistant"])
    p.add_argument("--train-on-eos", default="turn", choices=["turn", "all", "last", "none"])
    p.add_argument("--eot-tokens", nargs="*", default=None)
    p.add_argument("--cases", nargs="*", default=None)
    args = p.parse_args()
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    eot_ids = [tok.convert_tokens_to_ids(t) for t in (args.eot_tokens or [tok.eos_token])]
    with open(args.data, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    with open(args.out, "w", encoding="utf-8") as out:
        if args.cases is None:
            for row in rows:
                out.write(json.dumps(sample(tok, row, args, eot_ids, tok.eos_token_id)) + "\n")
            return
        result = {}
        for case in args.cases:
            roles, args.train_on_eos = case.split(":")
            args.roles_to_train = roles.split(",")
            result[case] = [sample(tok, row, args, eot_ids, tok.eos_token_id) for row in rows]
        json.dump(result, out)


if __name__ == "__main__":
    main()
