"""Writes the seed corpus of every harness in fuzz/ to OUT/<harness>/.

The seeds are the inputs the test suite reads (the repository's configs, chat templates and demo
data, the reference models' config.json and adapter_config.json that the build makes under
build/fixtures, shrunk copies of the test tokenizers) and a few hand-written valid files of each
kind, so that the fuzzer starts from inputs that get past the first checks. fuzz/regressions/
(the inputs of fixed findings) is added by scripts/fuzz.sh.

usage: make_seeds.py --root REPO --fixtures BUILD/fixtures --out DIR
"""
import argparse
import glob
import json
import os
import struct


def put(out, harness, name, data):
    d = os.path.join(out, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors_bytes(tensors, metadata=None):
    """The bytes safetensors writes for {name: (dtype, shape, raw bytes)} (8-byte aligned header)."""
    header, offset, blobs = {}, 0, []
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    # safetensors
    put(a.out, "safetensors", "f32", safetensors_bytes({"w": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4))}))
    put(a.out, "safetensors", "mixed", safetensors_bytes(
        {"a": ("BF16", [3], b"\x80\x3f" * 3), "b": ("U8", [4], b"\x01\x02\x03\x04"), "c": ("I64", [0], b""),
         "d": ("F16", [1, 1], b"\x00\x3c"), "e": ("BOOL", [2], b"\x00\x01")}, {"format": "pt"}))
    put(a.out, "safetensors", "empty", safetensors_bytes({}, {"format": "pt"}))

    # config.json
    for i, path in enumerate(sorted(glob.glob(os.path.join(a.fixtures, "**", "config.json"), recursive=True))):
        put(a.out, "model_config", f"fixture{i}.json", open(path, "rb").read())
    put(a.out, "model_config", "llama.json", json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 259, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 128},
        "tie_word_embeddings": False}))

    # run config
    for path in sorted(glob.glob(os.path.join(a.root, "configs", "*.yaml"))):
        put(a.out, "run_config", os.path.basename(path), open(path, "rb").read())
    put(a.out, "run_config", "chat.yaml", """base_model: m
load_in_8bit: true
adapter: lora
lora_r: 8
lora_target_modules: [q_proj, v_proj]
datasets:
  - path: chat.jsonl
    type: chat_template
    field_messages: conversations
    message_property_mappings: {role: from, content: value}
    roles_to_train: [gpt]
chat_template: chatml
special_tokens: {pad_token: "<|end_of_text|>"}
sequence_len: 128
micro_batch_size: 1
num_epochs: 2
learning_rate: 1e-4
warmup_ratio: 0.1
optimizer: adamw_bnb_8bit
output_dir: out
save_steps: 10
save_total_limit: 2
gpu_memory_limit: 20GiB
offload_layers: auto
""")

    # datasets: the first byte picks the type (dataset_fuzz.cpp): 0 "", 1 completion, 2 alpaca,
    # 3 input_output, 4 pretokenized, 5 chat_template; +6: the file is a .json array.
    demo = os.path.join(a.root, "data", "demo", "train.jsonl")
    if os.path.exists(demo):
        put(a.out, "dataset", "demo", b"\x01" + b"".join(open(demo, "rb").readlines()[:3]))
    put(a.out, "dataset", "completion", b"\x01" + b'{"text": "hello world"}\n\n{"text": "caf\\u00e9"}\n')
    put(a.out, "dataset", "alpaca", b"\x02" + b'{"instruction": "Add", "input": "1 2", "output": "3"}\n')
    put(a.out, "dataset", "input_output", b"\x03" + json.dumps(
        {"segments": [{"label": False, "text": "Q: "}, {"label": True, "text": "A"}]}).encode() + b"\n")
    put(a.out, "dataset", "pretokenized", b"\x04" + b'{"input_ids": [1, 2, 3], "labels": [-100, 2, 3], '
        b'"attention_mask": [1, 1, 1]}\n')
    put(a.out, "dataset", "chat", b"\x05" + json.dumps({"messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "train": True}]}).encode() + b"\n")
    put(a.out, "dataset", "array", b"\x07" + b'[{"text": "a"}, {"text": "b"}]')

    # tokenizer.json: the test tokenizers, shrunk to their first 300 tokens (and the merges among
    # them) so that one run parses in well under a millisecond.
    for path in sorted(glob.glob(os.path.join(a.fixtures, "tokenizers", "*", "tokenizer.json"))):
        t = json.load(open(path, encoding="utf-8"))
        model = t.get("model", {})
        if isinstance(model.get("vocab"), dict):
            vocab = dict(sorted(model["vocab"].items(), key=lambda kv: kv[1])[:300])
            model["vocab"] = vocab
            merges = []
            for m in model.get("merges", []):
                parts = m.split(" ") if isinstance(m, str) else m
                if len(parts) == 2 and parts[0] in vocab and parts[1] in vocab and "".join(parts) in vocab:
                    merges.append(m)
            model["merges"] = merges
        put(a.out, "tokenizer", os.path.basename(os.path.dirname(path)) + ".json", json.dumps(t, ensure_ascii=False))

    # chat templates, alone and with a conversation after "\n----\n"
    conversation = json.dumps([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                               {"role": "assistant", "content": "a", "reasoning_content": "r"}])
    for path in sorted(glob.glob(os.path.join(a.root, "engine", "text", "chat_templates", "*.jinja"))):
        text = open(path, "rb").read()
        put(a.out, "chat_template", os.path.basename(path), text)
        put(a.out, "chat_template", os.path.basename(path) + ".conv", text + b"\n----\n" + conversation.encode())
    put(a.out, "chat_template", "features.jinja", "{%- set ns = namespace(n=0) -%}{% macro m(x, y=2) %}{{ x|tojson }}"
        "{{ y ~ 'z' }}{% endmacro %}{% for k, v in {'a': [1, 2.5, none, true]}|dictsort %}{{ m(v) }}{{ loop.index }}"
        "{% set ns.n = ns.n + 1 %}{% endfor %}{{ 'abc'[::-1]|upper|replace('C', 'x') }}{{ range(3)|list|length }}"
        "{% if messages[0]['content'] is string and not false %}{{ messages|selectattr('role', 'equalto', 'user')"
        "|map(attribute='content')|join(',') }}{% elif x is defined %}{% else %}{{ raise_exception('no') }}"
        "{% endif %}{{ strftime_now('%Y') }}{{ '%d'|format(ns.n) }}{{ ' a b '.split()|trim }}")

    # adapter_config.json
    for i, path in enumerate(sorted(glob.glob(os.path.join(a.fixtures, "**", "adapter_config.json"), recursive=True))):
        put(a.out, "adapter_config", f"fixture{i}.json", open(path, "rb").read())
    put(a.out, "adapter_config", "minimal.json", json.dumps({
        "peft_type": "LORA", "r": 2, "lora_alpha": 4, "lora_dropout": 0.0, "target_modules": ["q_proj"],
        "bias": "none", "task_type": "CAUSAL_LM", "base_model_name_or_path": "m", "fan_in_fan_out": False,
        "use_rslora": False, "use_dora": False}))

    # bitsandbytes quant_state blobs, as json.dumps writes them (bnb_4bit_tensors in
    # engine/io/bnb_checkpoint.h; the harness's weight is nf4, [8, 64], double-quantized)
    put(a.out, "quant_state", "nested.json", json.dumps({
        "quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": [8, 64],
        "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 0.0123}))
    put(a.out, "quant_state", "plain.json", json.dumps({
        "quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [8, 64]}))

    # trainer_state.json
    put(a.out, "trainer_state", "state.json", json.dumps({
        "global_step": 10, "skipped_steps": 0, "data_epoch": 0, "data_batch": 10, "optimizer": "adamw_torch",
        "world_size": 1}))
    put(a.out, "trainer_state", "old.json", '{"global_step": 3, "skipped_steps": 1, "data_epoch": 1, "data_batch": 0}')


if __name__ == "__main__":
    main()
