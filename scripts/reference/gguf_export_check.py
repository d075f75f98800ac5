"""Checks a GGUF file qtrain exported against the Python stack, for qtrain's export tests.

    python scripts/reference/gguf_export_check.py SETTINGS.json OUT.json

SETTINGS.json: {"gguf": FILE, "folder": the HF model folder it was exported from, "adapter": the
PEFT adapter folded in or null, "ids": [[token ids]] or null, "original": a GGUF file llama.cpp's
converter wrote for the same model, or null, "folder_config": whether transformers builds the
model from the folder's config.json instead of FILE's keys (optional), "tensors": whether to
compare every tensor (optional)}. transformers loads FILE (from_pretrained with gguf_file=, which
dequantizes it) and computes the logits of "ids"; the reference is the folder in float32 with the
adapter merged by peft (merge_and_unload). With "tensors", each tensor of FILE is compared with
the reference's parameter that llama.cpp's own name table (gguf.get_tensor_name_map) maps to it,
as the converter writes it (experts split and stacked per layer, "llama" q / k rows permuted,
Gemma norms 1 + w): "tensor_max_rel" (the largest max|a - b| / max|b|), "tensors_missing" and
"tensors_unexpected"; and "config_mismatch": the config fields transformers reads from FILE's
keys that differ from the folder's ({field: [gguf, folder]}). With "sentencepiece", the folder's
tokenizer.model (read with transformers' protobuf bindings) and tokenizer_config.json give the
tokens, scores and types llama.cpp's converter writes (_create_vocab_sentencepiece), compared in
"spm_mismatch" (the first differing ids); gguf's SpecialVocab (llama.cpp's code) gives the
special ids, add_*_token flags and chat template, compared in "special_mismatch" ({key: [ours,
theirs]}); and "tokenizer_ids_equal" says whether transformers' tokenizer read from FILE encodes a
text as the folder's does. With "original", the tokenizer and
architecture keys of both files and their tensor names and shapes are compared, and transformers'
tokenizer read from FILE must encode a text as the folder's does. OUT.json: {"logits_max_rel",
"kv": {key: [ours, theirs]} for the keys that differ, "missing_keys", "tensor_names_equal",
"shapes_equal", "tokenizer_ids_equal"}.
"""

import json
import os
import re
import sys

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import numpy as np
import torch
from gguf import GGUFReader
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

TEXT = "Hello world! The capital of France is Paris. 3.14159 élève"


def fields(path):
    reader = GGUFReader(path)
    out = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or not (key.startswith("tokenizer.") or "." in key):
            continue
        value = field.contents()
        if isinstance(value, float):
            value = float(np.float32(value))
        out[key] = value
    return reader, out


def permute(w, heads):
    """llama.cpp's LlamaModel.permute: rotate-half rows to interleaved pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def expected_tensors(reference, arch):
    """The GGUF name and values of each parameter of `reference`, as llama.cpp's converter writes them."""
    import gguf

    config = reference.config.get_text_config()
    arch_id = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    names = gguf.get_tensor_name_map(arch_id, config.num_hidden_layers)
    out = {}
    for key, value in reference.state_dict().items():
        value = value.detach().float()
        key = key.replace("model.language_model.", "model.")
        if m := re.fullmatch(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)", key):
            if m[2] == "down_proj":
                out[f"blk.{m[1]}.ffn_down_exps.weight"] = value
            else:
                rows = value.shape[1] // 2
                out[f"blk.{m[1]}.ffn_gate_exps.weight"] = value[:, :rows]
                out[f"blk.{m[1]}.ffn_up_exps.weight"] = value[:, rows:]
            continue
        name = names.get_name(key, try_suffixes=(".weight", ".bias"))
        if name is None:
            continue
        if arch in ("gemma2", "gemma3") and name.endswith("norm.weight"):
            value = value + 1
        if arch == "llama" and re.search(r"attn_[qk]\.(weight|bias)$", name):
            heads = config.num_attention_heads if ".attn_q." in name else config.num_key_value_heads
            value = permute(value, heads)
        out[name] = value
    if config.tie_word_embeddings:
        out.pop("output.weight", None)
    return out


def compare_tensors(path, reference, result):
    from gguf.quants import dequantize

    reader = GGUFReader(path)
    arch = reader.fields["general.architecture"].contents()
    expected = expected_tensors(reference, arch)
    errors = []
    ours = set()
    for t in reader.tensors:
        ours.add(t.name)
        if t.name not in expected:
            continue
        want = expected[t.name].numpy()
        got = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(want.shape)
        errors.append(float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)))
    result["tensor_max_rel"] = max(errors)
    result["tensors_missing"] = sorted(set(expected) - ours)
    result["tensors_unexpected"] = sorted(ours - set(expected) - {"rope_freqs.weight"})
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    read = load_gguf_checkpoint(path, return_tensors=False)["config"]
    folder = reference.config.get_text_config().to_dict()
    result["config_mismatch"] = {k: [v, folder[k]] for k, v in read.items()
                                 if folder.get(k) is not None and k not in ("model_type", "architectures", "_model_name_or_path")
                                 and not isinstance(v, (dict, list)) and v != folder[k]
                                 and not (isinstance(v, float) and abs(v - folder[k]) <= 1e-6 * abs(folder[k]))}


def looks_special(t):
    return (t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (t.startswith("<|") and t.endswith("|>"))
            or (t.startswith("<\uff5c") and t.endswith("\uff5c>")) or (t.startswith("<unused") and t.endswith(">")))


def compare_sentencepiece(path, folder, result):
    import gguf
    from transformers.utils import sentencepiece_model_pb2_new as spm

    reader, kv = fields(path)
    tokens, scores, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.scores"], kv["tokenizer.ggml.token_type"]
    n = len(tokens)
    model = spm.ModelProto()
    model.ParseFromString(open(os.path.join(folder, "tokenizer.model"), "rb").read())
    want = [[f"[PAD{i}]", -10000.0, 5] for i in range(n)]
    kinds = {spm.ModelProto.SentencePiece.UNKNOWN: 2, spm.ModelProto.SentencePiece.CONTROL: 3,
             spm.ModelProto.SentencePiece.UNUSED: 5, spm.ModelProto.SentencePiece.BYTE: 6}
    for i, piece in enumerate(model.pieces[:n]):
        want[i] = [piece.piece, piece.score, kinds.get(piece.type, 1)]
    config = json.load(open(os.path.join(folder, "tokenizer_config.json")))
    for key, entry in config.get("added_tokens_decoder", {}).items():
        i = int(key)
        if i < n:
            special = entry.get("special") or looks_special(entry["content"])
            want[i] = [entry["content"] if special else entry["content"].replace("\u2581", " "), -1000.0,
                       3 if special else 4]
    ours = [[t, float(np.float32(s)), int(k)] for t, s, k in zip(tokens, scores, types)]
    result["spm_mismatch"] = [[i, ours[i], want[i]] for i in range(n) if ours[i] != want[i]][:5]
    special = gguf.SpecialVocab(folder, load_merges=False, n_vocab=n)
    keys = {"unk": "unknown", "sep": "seperator", "pad": "padding"}
    theirs = {f"tokenizer.ggml.{keys.get(t, t)}_token_id": v for t, v in special.special_token_ids.items()}
    theirs.update({f"tokenizer.ggml.add_{t}_token": v for t, v in special.add_special_token.items()})
    if special.chat_template is not None:
        theirs["tokenizer.chat_template"] = special.chat_template
    ours_special = {k: v for k, v in kv.items() if re.fullmatch(r"tokenizer\.ggml\.(\w+_token_id|add_\w+_token)", k)
                    or k == "tokenizer.chat_template"}
    result["special_mismatch"] = {k: [ours_special.get(k), theirs.get(k)] for k in set(theirs) | set(ours_special)
                                  if ours_special.get(k) != theirs.get(k)}
    tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    folder_tokenizer = AutoTokenizer.from_pretrained(folder)
    result["tokenizer_ids"] = [tokenizer(TEXT)["input_ids"], folder_tokenizer(TEXT)["input_ids"]]
    result["tokenizer_ids_equal"] = result["tokenizer_ids"][0] == result["tokenizer_ids"][1]


def main():
    settings_path, out_path = sys.argv[1:3]
    s = json.load(open(settings_path))
    path = s["gguf"]
    result = {}
    reference = AutoModelForCausalLM.from_pretrained(s["folder"], dtype=torch.float32).eval()
    if s.get("adapter"):
        from peft import PeftModel

        reference = PeftModel.from_pretrained(reference, s["adapter"]).merge_and_unload().eval()
    if s.get("tensors"):
        compare_tensors(path, reference, result)
    if s.get("sentencepiece"):
        compare_sentencepiece(path, s["folder"], result)
    if s.get("ids"):
        extra = {"config": AutoConfig.from_pretrained(s["folder"])} if s.get("folder_config") else {}
        model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                     dtype=torch.float32, **extra).eval()
        ids = torch.tensor(s["ids"], dtype=torch.long)
        with torch.no_grad():
            ours, theirs = model(input_ids=ids).logits, reference(input_ids=ids).logits
        result["logits_max_rel"] = float((ours - theirs).abs().max() / theirs.abs().max())
    if s.get("original"):
        reader, ours_kv = fields(path)
        original, theirs_kv = fields(s["original"])
        compared = [k for k in theirs_kv if k.startswith("tokenizer.") or k.split(".")[0] == ours_kv.get(
            "general.architecture") and not k.endswith("file_type")]
        result["kv"] = {k: [str(ours_kv.get(k))[:200], str(theirs_kv[k])[:200]] for k in compared
                        if ours_kv.get(k) != theirs_kv[k]}
        result["missing_keys"] = [k for k in compared if k not in ours_kv]
        names = {t.name: [int(d) for d in t.shape] for t in reader.tensors}
        original_names = {t.name: [int(d) for d in t.shape] for t in original.tensors}
        result["tensor_names_equal"] = sorted(names) == sorted(original_names)
        result["shapes_equal"] = names == original_names
        tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
        folder_tokenizer = AutoTokenizer.from_pretrained(s["folder"])
        result["tokenizer_ids_equal"] = tokenizer(TEXT)["input_ids"] == folder_tokenizer(TEXT)["input_ids"]
    json.dump(result, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
