"""A tiny Gemma 3 model folder with a SentencePiece tokenizer, for qtrain's GGUF tokenizer test.

    python scripts/reference/gguf_spm_fixture.py TOKENIZER_DIR OUT_DIR

TOKENIZER_DIR: a SentencePiece-style tokenizer.json (byte_fallback BPE, as transformers converts
Gemma's), e.g. the gemma3 stand-in of make_test_tokenizers.py. OUT_DIR receives a random
Gemma3ForCausalLM (6 layers: five sliding, one full, as llama.cpp lays Gemma 3 out) whose
vocabulary is the tokenizer's, that tokenizer.json, its tokenizer_config.json with
added_tokens_decoder and a chat template as transformers saves them, and tokenizer.model: a
SentencePiece ModelProto (transformers' own protobuf bindings) with a piece per id, typed as
SentencePiece types them (<unk> unknown, special added tokens control, <0xNN> byte, other added
tokens user-defined, the rest normal) and scored -id (pieces in merge order, as SentencePiece's
BPE trainer scores them; control pieces 0).
"""

import json
import os
import re
import shutil
import sys

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig
from transformers.utils import sentencepiece_model_pb2_new as spm

TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}"
            "<end_of_turn>\n{% endfor %}")


def main():
    source, out = sys.argv[1:3]
    os.makedirs(out, exist_ok=True)
    tj = json.load(open(os.path.join(source, "tokenizer.json"), encoding="utf-8"))
    tokens = {i: t for t, i in tj["model"]["vocab"].items()}
    added = {a["id"]: a for a in tj["added_tokens"]}
    for i, a in added.items():
        tokens[i] = a["content"]
    n = max(tokens) + 1
    model = spm.ModelProto()
    for i in range(n):
        piece = model.pieces.add()
        piece.piece = tokens.get(i, f"<unused{i}>")
        piece.score = 0.0
        if piece.piece == "<unk>":
            piece.type = spm.ModelProto.SentencePiece.UNKNOWN
        elif i in added and added[i]["special"]:
            piece.type = spm.ModelProto.SentencePiece.CONTROL
        elif re.fullmatch(r"<0x[0-9A-F]{2}>", piece.piece):
            piece.type = spm.ModelProto.SentencePiece.BYTE
        elif i in added:
            piece.type = spm.ModelProto.SentencePiece.USER_DEFINED
        else:
            piece.score = -float(i)
    open(os.path.join(out, "tokenizer.model"), "wb").write(model.SerializeToString())
    shutil.copy(os.path.join(source, "tokenizer.json"), os.path.join(out, "tokenizer.json"))
    config = json.load(open(os.path.join(source, "tokenizer_config.json")))
    config["added_tokens_decoder"] = {
        str(i): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
        for i, a in sorted(added.items())}
    config["chat_template"] = TEMPLATE
    json.dump(config, open(os.path.join(out, "tokenizer_config.json"), "w"), indent=1)
    ids = {a["content"]: i for i, a in added.items()}
    torch.manual_seed(0)
    cfg = Gemma3TextConfig(vocab_size=n, hidden_size=32, intermediate_size=64, num_hidden_layers=6,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16,
                           sliding_window=8, max_position_embeddings=64,
                           layer_types=["sliding_attention"] * 5 + ["full_attention"],
                           bos_token_id=ids["<bos>"], eos_token_id=ids["<eos>"], pad_token_id=ids["<pad>"])
    Gemma3ForCausalLM(cfg).save_pretrained(out)


if __name__ == "__main__":
    main()
