"""peft's side of qtrain's PEFT adapter interop test (tests/engine/io/peft_adapter_test.cpp).

One run (one import of transformers + peft, which is most of its time) does both directions:

1. Makes a tiny random LlamaForCausalLM (hidden 64, 2 layers, 4 heads, 2 kv heads, intermediate
   128, vocab 128) and saves it to WORK/base.
2. With --qtrain-adapter DIR --qtrain-expected FILE (repeatable, in pairs): loads each adapter
   qtrain wrote into that base with PeftModel.from_pretrained and checks that every LoRA weight and
   scaling PEFT ends up with is what qtrain meant (FILE holds "<module>.lora_A" / "<module>.lora_B",
   the scaling, and where qtrain wrote a regular expression as target_modules, that expression),
   that exactly those modules got adapters, and that the model runs. Exits 1 listing every
   mismatch.
3. Makes a PEFT adapter (r 4, alpha 8, dropout 0.1 on q/k/o/gate_proj, PEFT's init, then random B)
   with get_peft_model + save_pretrained into WORK/peft_adapter, and writes
   WORK/peft_expected.safetensors for qtrain to compare with:
     <module>.lora_A / .lora_B   the adapter's weights
     init.A                      nn.init.kaiming_uniform_(empty(4, 64), a=sqrt(5)) from a generator
                                 seeded 1234 (what PEFT's init draws)
     numerics.*                  layer 0 q_proj forwards: fp32 eval, fp32 train (dropout after
                                 torch.manual_seed(7)), and through peft's bitsandbytes Linear4bit
                                 LoRA layer in bf16 (QLoRA's path: delta rounded to bf16, then added)

    python scripts/reference/peft_reference.py --work DIR [--qtrain-adapter DIR --qtrain-expected FILE ...]
"""

import argparse
import math
import os
import sys
import warnings

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
warnings.filterwarnings("ignore")

import torch
from bnb_oracle import bnb  # bitsandbytes, the same on every CPU: see Note [bitsandbytes' CPU defects]
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer

BASE_CONFIG = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=128, vocab_size=128, max_position_embeddings=64)
PEFT_TARGETS = ["q_proj", "k_proj", "o_proj", "gate_proj"]


def make_base(work):
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**BASE_CONFIG))
    path = os.path.join(work, "base")
    model.save_pretrained(path)
    return path


def lora_layers(peft_model):
    return {name: m for name, m in peft_model.base_model.model.named_modules() if isinstance(m, LoraLayer)}


def check_qtrain_adapter(base_path, adapter_dir, expected_file):
    errors = []
    with safe_open(expected_file, "pt") as f:
        expected = {k: f.get_tensor(k) for k in f.keys()}
        scaling = float(f.metadata()["scaling"])
        regex = f.metadata().get("target_modules_regex")
    modules = sorted({k.rsplit(".", 1)[0] for k in expected})

    model = PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(base_path), adapter_dir)
    cfg = model.peft_config["default"]
    if cfg.peft_type.value != "LORA" or cfg.task_type != "CAUSAL_LM":
        errors.append(f"peft_type/task_type: {cfg.peft_type} {cfg.task_type}")
    if regex is not None:
        # A string target_modules: peft matches it against whole module names (re.fullmatch).
        if cfg.target_modules != regex:
            errors.append(f"target_modules {cfg.target_modules!r} != the regular expression {regex!r}")
    else:
        want_targets = sorted({m.rsplit(".", 1)[1] for m in modules})
        if sorted(cfg.target_modules) != want_targets:
            errors.append(f"target_modules {sorted(cfg.target_modules)} != {want_targets}")

    layers = lora_layers(model)
    if sorted(layers) != modules:
        errors.append(f"PEFT adapted {sorted(layers)}, qtrain meant {modules}")
    for name in modules:
        layer = layers.get(name)
        if layer is None:
            continue
        for part, weights in (("lora_A", layer.lora_A), ("lora_B", layer.lora_B)):
            got, want = weights["default"].weight.detach(), expected[f"{name}.{part}"]
            if got.dtype != torch.float32 or not torch.equal(got, want):
                errors.append(f"{name}.{part}: PEFT has {got.dtype} {tuple(got.shape)}, "
                              f"max |diff| {(got.float() - want).abs().max().item() if got.shape == want.shape else 'n/a'}")
        if layer.scaling["default"] != scaling:
            errors.append(f"{name}: PEFT scaling {layer.scaling['default']!r} != qtrain's {scaling!r}")
        if layer.r["default"] != expected[f"{name}.lora_A"].shape[0]:
            errors.append(f"{name}: PEFT r {layer.r['default']}")

    with torch.no_grad():
        logits = model(torch.arange(10).unsqueeze(0)).logits
    if not torch.isfinite(logits).all():
        errors.append("forward through the adapted model is not finite")
    # The adapter must change the model (its B are non-zero).
    with torch.no_grad(), model.disable_adapter():
        if torch.equal(model(torch.arange(10).unsqueeze(0)).logits, logits):
            errors.append("the adapter does not change the model's output")
    return errors


def bnb_qlora_forward(q_proj, x_bf16):
    """PEFT's QLoRA path: peft.tuners.lora.bnb.Linear4bit over a bitsandbytes NF4 copy of the base
    weight, with the same lora_A/lora_B. Returns (base output, adapted output)."""
    from peft.tuners.lora.bnb import Linear4bit as LoraLinear4bit

    w = q_proj.base_layer.weight.detach()
    base = bnb.nn.Linear4bit(w.shape[1], w.shape[0], bias=False, compute_dtype=torch.bfloat16, quant_type="nf4")
    base.weight = bnb.nn.Params4bit(w.clone(), requires_grad=False, quant_type="nf4")
    base = base.to("cpu")
    r, alpha = q_proj.r["default"], q_proj.lora_alpha["default"]
    layer = LoraLinear4bit(base, "default", config=LoraConfig(r=r, lora_alpha=alpha), r=r, lora_alpha=alpha)
    layer.lora_A.float()  # get_peft_model's autocast_adapter_dtype keeps adapters in fp32
    layer.lora_B.float()
    with torch.no_grad():
        layer.lora_A["default"].weight.copy_(q_proj.lora_A["default"].weight)
        layer.lora_B["default"].weight.copy_(q_proj.lora_B["default"].weight)
        layer.eval()
        return base(x_bf16), layer(x_bf16)


def make_peft_adapter(base_path, work):
    torch.manual_seed(1)
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1, target_modules=PEFT_TARGETS,
                        init_lora_weights=True, task_type="CAUSAL_LM")
    model = get_peft_model(LlamaForCausalLM.from_pretrained(base_path), config)
    gen = torch.Generator().manual_seed(2)
    out = {}
    layers = lora_layers(model)
    with torch.no_grad():
        for name, layer in sorted(layers.items()):
            layer.lora_B["default"].weight.normal_(generator=gen)
            out[f"{name}.lora_A"] = layer.lora_A["default"].weight.detach().clone()
            out[f"{name}.lora_B"] = layer.lora_B["default"].weight.detach().clone()
    model.save_pretrained(os.path.join(work, "peft_adapter"))

    init = torch.empty(4, 64)
    torch.nn.init.kaiming_uniform_(init, a=math.sqrt(5), generator=torch.Generator().manual_seed(1234))
    out["init.A"] = init

    q_proj = layers["model.layers.0.self_attn.q_proj"]
    x = torch.randn(3, 5, 64, generator=gen)
    with torch.no_grad():
        out["numerics.x"] = x
        out["numerics.w"] = q_proj.base_layer.weight.detach().clone()
        q_proj.eval()
        out["numerics.y_eval"] = q_proj(x)
        q_proj.train()
        torch.manual_seed(7)
        out["numerics.y_train"] = q_proj(x)
    x_bf16 = x.to(torch.bfloat16)
    out["numerics.x_bf16"] = x_bf16
    out["numerics.qlora_base_out"], out["numerics.qlora_y"] = bnb_qlora_forward(q_proj, x_bf16)
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(work, "peft_expected.safetensors"))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True)
    parser.add_argument("--qtrain-adapter", action="append", default=[])
    parser.add_argument("--qtrain-expected", action="append", default=[])
    args = parser.parse_args()
    if len(args.qtrain_adapter) != len(args.qtrain_expected):
        parser.error("give --qtrain-adapter and --qtrain-expected in pairs")
    base_path = make_base(args.work)
    errors = []
    for adapter, expected in zip(args.qtrain_adapter, args.qtrain_expected):
        errors += [f"{adapter}: {e}" for e in check_qtrain_adapter(base_path, adapter, expected)]
    make_peft_adapter(base_path, args.work)
    for e in errors:
        print("MISMATCH:", e, file=sys.stderr)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
