"""axolotl-style `type: chat_template` samples made with transformers 5.23, for qtrain's
chat-dataset parity tests (tests/engine/data/chat_dataset_test.cpp, tests/apps/commands_test.cpp).

The rules are those of engine/data/chat_dataset.cpp, Note [Chat labels from character spans].
The turns are built as axolotl's ChatTemplateStrategy.get_conversation_thread builds them (axolotl
067b021c, src/axolotl/prompt_strategies/chat_template.py): nulls removed from the row, the row's
"system" prepended as a system turn when the first message is not one, message keys mapped
(role, content, --properties) and every other key passed on, tool_calls' string arguments parsed,
content given as a list of parts joined (parts with "train"/"weight" give the training detail),
a leading system turn dropped with --drop-system-message. Then the whole conversation is rendered
once (apply_chat_template(tokenize=False), no generation prompt) and tokenized once
(add_special_tokens=False, return_offsets_mapping=True), and
  1. each message's content is found in the rendered text from the end of the previous one
     (verbatim, else stripped of surrounding whitespace);
  2. a turn trains per its --message-field-training flag, else (with a
     --message-field-training-detail list) when that list is not empty, else when its role is in
     roles_to_train or --train-on-inputs; it trains every token with at least one character
     inside its content span, or with a detail, inside a range marked train (character offsets,
     end inclusive);
  3. the turn ends at the token after its last content token; within 4 tokens from there the
     first eot token, and separately the first EOS, are trained per train_on_eot (default
     train_on_eos) and train_on_eos: turn (trained turns), all, last (the one found after the
     last turn looked at: a trained turn, or any turn when an option is all), none;
  4. a message with empty content trains nothing, not even its end of turn (an empty string is
     found anywhere, so it has no place in the text).
Roles map through `roles` (source -> template role) and then the built-in aliases.

    python scripts/reference/chat_data_reference.py --tokenizer DIR --data rows.jsonl \
        --roles-to-train assistant --train-on-eos turn --out samples.jsonl

Output: one {"input_ids": [...], "labels": [...]} per input row. With --cases ROLES:EOS[:EOT] ...
(e.g. `assistant:turn user,assistant:all assistant:turn:none`), one tokenizer load serves several
settings and --out is one JSON object {"ROLES:EOS[:EOT]": [{"input_ids", "labels"}, ...], ...}.
"""

import argparse
import json

from transformers import AutoTokenizer

BUILTIN_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                 "system": "system", "tool": "tool"}
EOT_SEARCH = 4


def without_nulls(v):
    if isinstance(v, dict):
        return {k: without_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [without_nulls(x) for x in v]
    return v


def find_content(text, content, start):
    """(begin, end, characters stripped from the content's front)"""
    p = text.find(content, start)
    if p >= 0:
        return p, p + len(content), 0
    stripped = content.strip(" \t\n\r")
    p = text.find(stripped, start)
    if p < 0:
        raise SystemExit(f"content not found verbatim in the rendering: {content!r}")
    return p, p + len(stripped), len(content) - len(content.lstrip(" \t\n\r"))


def join_parts(parts):
    text, details, explicit = "", [], False
    for part in parts:
        if not isinstance(part, dict):
            continue
        piece = part.get("text") or part.get("content") or part.get("value") or ""
        train = True
        if part.get("train") is not None:
            explicit, train = True, bool(part["train"])
        elif part.get("weight") is not None:
            explicit, train = True, part["weight"] not in (0, 0.0)
        if piece:
            details.append({"begin_offset": len(text), "end_offset": len(text) + len(piece) - 1, "train": train})
        text += piece
    return text, (details if explicit else None)


def turns_of(row, args):
    messages = row[args.field_messages]
    if isinstance(messages, str):
        messages = without_nulls(json.loads(messages))
    turns = []
    for m in messages:
        role = args.roles.get(m[args.role_key]) or BUILTIN_ROLES[m[args.role_key]]
        content, detail = m[args.content_key], None
        if isinstance(content, list):
            content, detail = join_parts(content)
        message = {"role": role, "content": content}
        mapped = {args.role_key, args.content_key}
        for key, source in args.properties.items():
            mapped.add(source)
            if source in m:
                message[key] = m[source]
        for key, value in m.items():
            if key not in mapped and key not in message:
                message[key] = value
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                function["arguments"] = json.loads(function["arguments"])
        turn = {"message": message, "role": role, "content": content, "training": None, "detail": detail}
        if args.message_field_training and args.message_field_training in m:
            turn["training"] = m[args.message_field_training]
        if detail is None and args.message_field_training_detail and args.message_field_training_detail in m:
            turn["detail"] = m[args.message_field_training_detail]
        turns.append(turn)
    if "system" in row and turns[0]["role"] != "system":
        turns.insert(0, {"message": {"role": "system", "content": row["system"]}, "role": "system",
                         "content": row["system"], "training": None, "detail": None})
    if args.drop_system_message and turns[0]["role"] == "system":
        turns = turns[1:]
    return turns


def sample(tok, raw, args, eot_ids, eos_id):
    row = without_nulls(raw)
    turns = turns_of(row, args)
    tools = row.get(args.field_tools)
    if isinstance(tools, str):
        tools = json.loads(tools)
    text = tok.apply_chat_template([t["message"] for t in turns], tools=tools, tokenize=False,
                                   add_generation_prompt=False, chat_template=args.chat_template)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    labels = [-100] * len(ids)
    train_on_eot = args.train_on_eot or args.train_on_eos
    trained_roles = {args.roles.get(r) or BUILTIN_ROLES.get(r, r) for r in args.roles_to_train}
    any_all = "all" in (args.train_on_eos, train_on_eot)
    last = {"eot": None, "eos": None}

    def overlaps(k, begin, end):
        a, b = offsets[k]
        return a < b and a < end and b > begin

    cursor = 0
    for turn in turns:
        if not turn["content"]:
            continue  # rule 4: nothing to anchor it to
        begin, end, front = find_content(text, turn["content"], cursor)
        cursor = end
        if turn["training"] is not None:
            train = turn["training"]
        elif turn["detail"] is not None:
            train = bool(turn["detail"])
        else:
            train = args.train_on_inputs or turn["role"] in trained_roles
        if not train and not any_all:
            continue
        ranges = None
        if turn["detail"] is not None:
            ranges = [(begin + max(r["begin_offset"] - front, 0),
                       min(end, begin + max(r["end_offset"] + 1 - front, 0)), r["train"]) for r in turn["detail"]]
        turn_end = 0
        for k, (a, b) in enumerate(offsets):
            inside = overlaps(k, begin, end)
            if inside or (b > a and a < begin):
                turn_end = k + 1
            if inside and train and (ranges is None or any(t and overlaps(k, rb, re) for rb, re, t in ranges)):
                labels[k] = ids[k]
        for name, wanted, option in (("eot", eot_ids, train_on_eot), ("eos", [eos_id], args.train_on_eos)):
            for k in range(turn_end, min(turn_end + EOT_SEARCH, len(ids))):
                if ids[k] in wanted:
                    last[name] = k
                    if option == "all" or (option == "turn" and train):
                        labels[k] = ids[k]
                    break
    for name, option in (("eot", train_on_eot), ("eos", args.train_on_eos)):
        if option == "last" and last[name] is not None:
            labels[last[name]] = ids[last[name]]
    return {"input_ids": ids, "labels": labels}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--chat-template", default=None, help="a .jinja file; default: the tokenizer's template")
    p.add_argument("--field-messages", default="messages")
    p.add_argument("--field-tools", default="tools")
    p.add_argument("--role-key", default="role")
    p.add_argument("--content-key", default="content")
    p.add_argument("--properties", default="{}", help="JSON {template key: message key}")
    p.add_argument("--roles", default="{}", help="JSON {source role: template role}")
    p.add_argument("--message-field-training", default="")
    p.add_argument("--message-field-training-detail", default="")
    p.add_argument("--drop-system-message", action="store_true")
    p.add_argument("--train-on-inputs", action="store_true")
    p.add_argument("--roles-to-train", nargs="*", default=["assistant"])
    p.add_argument("--train-on-eos", default="turn", choices=["turn", "all", "last", "none"])
    p.add_argument("--train-on-eot", default="", choices=["", "turn", "all", "last", "none"])
    p.add_argument("--eot-tokens", nargs="*", default=None)
    p.add_argument("--cases", nargs="*", default=None)
    args = p.parse_args()
    args.properties = json.loads(args.properties)
    args.roles = json.loads(args.roles)
    if args.chat_template:
        with open(args.chat_template, encoding="utf-8") as f:
            args.chat_template = f.read()
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    eot_ids = [tok.convert_tokens_to_ids(t) for t in (args.eot_tokens or [tok.eos_token])]
    with open(args.data, encoding="utf-8") as f:
        text = f.read()
    rows = json.loads(text) if args.data.endswith(".json") and text.lstrip().startswith("[") else [
        json.loads(line) for line in text.splitlines() if line.strip()]
    with open(args.out, "w", encoding="utf-8") as out:
        if args.cases is None:
            for row in rows:
                out.write(json.dumps(sample(tok, row, args, eot_ids, tok.eos_token_id)) + "\n")
            return
        result = {}
        for case in args.cases:
            roles, args.train_on_eos, *eot = case.split(":")
            args.train_on_eot = eot[0] if eot else ""
            args.roles_to_train = roles.split(",")
            result[case] = [sample(tok, row, args, eot_ids, tok.eos_token_id) for row in rows]
        json.dump(result, out)


if __name__ == "__main__":
    main()
