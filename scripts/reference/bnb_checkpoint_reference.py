"""Reference side of qtrain's Hugging Face folder and bitsandbytes checkpoint interop tests.

tests/engine/io/hf_folder_test.cpp and bnb_checkpoint_test.cpp call this with the venv's python
(QTRAIN_PYTHON); each subcommand is one process, so torch/transformers are imported once per call.

    make-quantized --dir D   tiny random Llama (bf16) in D/fp; transformers + bitsandbytes quantize
                             it on the CPU and save D/nf4 (NF4, double quant), D/fp4 (FP4, plain)
                             and D/int8 (LLM.int8); D/reference.safetensors holds what bitsandbytes
                             makes of those checkpoints: "<folder>/<weight>.dq" (dequantize_4bit)
                             and "int8/<weight>.CB", ".SCB".
    check-qtrain --dir D     loads the folders qtrain wrote (D/qtrain_nf4, D/qtrain_fp4,
                             D/qtrain_int8) with AutoModelForCausalLM.from_pretrained and checks them
                             against D/expected.safetensors (qtrain's values) and against bitsandbytes'
                             own quantization of D/fp (bitwise: packed codes, absmax, offsets, CB,
                             SCB, dequantized weights, logits). Exits 1 listing every mismatch.
    hf-interop --dir D       loads qtrain's sharded float folder D/qtrain, checks every tensor against
                             D/expected.safetensors, then saves it sharded again as D/python.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # nothing here needs compiled kernels
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from bnb_oracle import bnb, F  # bitsandbytes, the same on every CPU: see Note [bitsandbytes' CPU defects]
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()

CONFIGS_4BIT = {
    "nf4": dict(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True),
    "fp4": dict(load_in_4bit=True, bnb_4bit_quant_type="fp4", bnb_4bit_use_double_quant=False,
                bnb_4bit_compute_dtype=torch.bfloat16),
}
CONFIG_8BIT = dict(load_in_8bit=True)


def quantized_linears(model):
    return {name + ".weight": m for name, m in model.named_modules()
            if isinstance(m, (bnb.nn.Linear4bit, bnb.nn.Linear8bitLt))}


def load(path, **kwargs):
    model, info = AutoModelForCausalLM.from_pretrained(path, device_map="cpu", output_loading_info=True, **kwargs)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise SystemExit(f"{path}: transformers reports {problems}")
    return model.eval()


def make_quantized(d):
    torch.manual_seed(1234)
    cfg = LlamaConfig(hidden_size=64, num_hidden_layers=2, intermediate_size=128, vocab_size=128,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=False)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(os.path.join(d, "fp"))
    ref = {}
    for name, kwargs in CONFIGS_4BIT.items():
        q = load(os.path.join(d, "fp"), quantization_config=BitsAndBytesConfig(**kwargs))
        q.save_pretrained(os.path.join(d, name))
        # What bitsandbytes makes of the checkpoint as saved, not of the model in memory.
        for w, m in quantized_linears(load(os.path.join(d, name))).items():
            ref[f"{name}/{w}.dq"] = F.dequantize_4bit(m.weight.data, m.weight.quant_state)
    q = load(os.path.join(d, "fp"), quantization_config=BitsAndBytesConfig(**CONFIG_8BIT))
    q.save_pretrained(os.path.join(d, "int8"))
    for w, m in quantized_linears(load(os.path.join(d, "int8"))).items():
        ref[f"int8/{w}.CB"] = m.weight.data.contiguous()
        ref[f"int8/{w}.SCB"] = m.weight.SCB.contiguous()
    save_file(ref, os.path.join(d, "reference.safetensors"))
    print(f"wrote {len(ref)} reference tensors to {d}")


def bits_equal(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def folder_tensors(path):
    out = {}
    for file in sorted(os.listdir(path)):
        if file.endswith(".safetensors"):
            out.update(load_file(os.path.join(path, file)))
    return out


def describe(t):
    if t.dtype == torch.uint8 and t.dim() == 1:
        return repr(bytes(t.tolist()))
    return f"{t.dtype} {list(t.shape)}"


def check_qtrain(d):
    expected = load_file(os.path.join(d, "expected.safetensors"))
    with safe_open(os.path.join(d, "expected.safetensors"), "pt") as f:
        meta = json.loads(f.metadata()["weights"])
    errors = []

    def expect(cond, what):
        if not cond:
            errors.append(what)

    ids = torch.arange(24).reshape(2, 12) * 5 % 128
    for name, kwargs in list(CONFIGS_4BIT.items()) + [("int8", CONFIG_8BIT)]:
        ours = load(os.path.join(d, "qtrain_" + name))
        ref = load(os.path.join(d, "fp"), quantization_config=BitsAndBytesConfig(**kwargs))
        ours_q, ref_q = quantized_linears(ours), quantized_linears(ref)
        expect(sorted(ours_q) == sorted(ref_q) and len(ours_q) == len(meta[name]),
               f"{name}: quantized modules {sorted(ours_q)} vs bitsandbytes {sorted(ref_q)}")
        for w, info in meta[name].items():
            m, r = ours_q.get(w), ref_q.get(w)
            if m is None or r is None:
                errors.append(f"{name}: {w} is not a quantized linear after loading")
                continue
            p = f"{name}/{w}"
            if name == "int8":
                expect(bits_equal(m.weight.data, expected[p + ".CB"]), f"{p}: CB differs from qtrain's")
                expect(bits_equal(m.weight.SCB, expected[p + ".SCB"]), f"{p}: SCB differs from qtrain's")
                expect(bits_equal(m.weight.data, r.weight.data), f"{p}: CB differs from bitsandbytes' quantization")
                expect(bits_equal(m.weight.SCB, r.weight.SCB), f"{p}: SCB differs from bitsandbytes' quantization")
                continue
            qs, rs = m.weight.quant_state, r.weight.quant_state
            for field in ["quant_type", "blocksize"]:
                expect(getattr(qs, field) == info[field], f"{p}: {field} {getattr(qs, field)} != {info[field]}")
            expect(str(qs.dtype) == "torch." + info["dtype"], f"{p}: dtype {qs.dtype} != {info['dtype']}")
            expect(list(qs.shape) == info["shape"], f"{p}: shape {list(qs.shape)} != {info['shape']}")
            expect(qs.nested == info["nested"], f"{p}: nested {qs.nested} != {info['nested']}")
            dq = F.dequantize_4bit(m.weight.data, qs)
            expect(bits_equal(dq, expected[p + ".dq"]), f"{p}: bitsandbytes' dequantization differs from qtrain's")
            expect(bits_equal(m.weight.data, r.weight.data), f"{p}: packed codes differ from bitsandbytes'")
            expect(bits_equal(qs.absmax, rs.absmax), f"{p}: absmax differs from bitsandbytes'")
            if qs.nested:
                expect(bits_equal(qs.offset.reshape(1), expected[p + ".offset"]), f"{p}: offset differs from qtrain's")
                expect(bits_equal(qs.offset, rs.offset), f"{p}: offset {qs.offset} != bitsandbytes' {rs.offset}")
                expect(bits_equal(qs.state2.absmax, rs.state2.absmax), f"{p}: nested absmax differs")
                expect(bits_equal(qs.state2.code, rs.state2.code), f"{p}: nested quant_map differs")
        # Saving the loaded model again (bitsandbytes' _save_to_state_dict) must give back exactly
        # the tensors qtrain wrote, JSON blobs included.
        written, saved = folder_tensors(os.path.join(d, "qtrain_" + name)), ours.state_dict()
        expect(sorted(written) == sorted(saved), f"{name}: keys {sorted(set(written) ^ set(saved))} differ on re-save")
        for key, t in written.items():
            if key in saved and not bits_equal(saved[key], t):
                errors.append(f"{name}: {key} re-saved by bitsandbytes as "
                              f"{describe(saved[key])} but qtrain wrote {describe(t)}")
        with torch.no_grad():
            a, b = ours(ids).logits, ref(ids).logits
        expect(bits_equal(a, b), f"{name}: logits differ from the bitsandbytes-quantized model "
                                 f"(max abs diff {(a.float() - b.float()).abs().max().item()})")
        print(f"{name}: checked {len(meta[name])} quantized linears and the logits")
    if errors:
        print("MISMATCH:\n  " + "\n  ".join(errors))
        sys.exit(1)
    print("OK")


def hf_interop(d):
    expected = load_file(os.path.join(d, "expected.safetensors"))
    model, info = LlamaForCausalLM.from_pretrained(os.path.join(d, "qtrain"), output_loading_info=True)
    errors = [f"loading info: {info}"] if any(info.values()) else []
    state = model.state_dict()
    if sorted(state) != sorted(expected):
        errors.append(f"tensor names {sorted(state)} != {sorted(expected)}")
    for name, t in expected.items():
        if name in state and not bits_equal(state[name], t):
            errors.append(f"{name}: {state[name].dtype} {list(state[name].shape)} differs from qtrain's")
    model.save_pretrained(os.path.join(d, "python"), max_shard_size=20_000)
    if errors:
        print("MISMATCH:\n  " + "\n  ".join(errors))
        sys.exit(1)
    print(f"OK: {len(expected)} tensors")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["make-quantized", "check-qtrain", "hf-interop"])
    parser.add_argument("--dir", required=True)
    args = parser.parse_args()
    {"make-quantized": make_quantized, "check-qtrain": check_qtrain, "hf-interop": hf_interop}[args.command](args.dir)


if __name__ == "__main__":
    main()
