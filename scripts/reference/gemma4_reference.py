"""Reference outputs of transformers + peft + bitsandbytes (CPU, float32) for qtrain's Gemma 4
parity tests, in the layout of model_reference.py (whose helpers it uses).

Under --out/:
  gemma4/                   a tiny awkward gemma4_text decoder: sliding and full layers, a window
                            shorter than the sequence, attention_k_eq_v (full layers without
                            v_proj), num_global_key_value_heads != num_key_value_heads,
                            global_head_dim != head_dim, proportional rope on the full layers,
                            random plain-w norms and layer_scalar, a final soft-cap small enough
                            to bite. base/, adapter/ and reference.safetensors as
                            model_reference.py writes them (fp32, NF4, INT8, int8_exact)
  gemma4_configs/<case>/config.json and gemma4_configs/reference.safetensors: configs written
                            by hand (global_head_dim form, the 26B-A4B's keys with fewer layers),
                            re-saved by transformers (per_layer_config with "05"-style keys) and
                            a multimodal gemma4 whose text_config holds the decoder; per case the
                            per-layer kinds, head_dim, kv heads and v_proj presence, and the rope
                            inv_freq of each layer kind as Gemma4TextRotaryEmbedding computes them
  gemma4_mm/                a tiny Gemma4ForConditionalGeneration (decoder under
                            model.language_model., a vision tower, no lm_head on disk) and its
                            text-only logits and loss, and with an adapter its LoRA gradients
  gemma4_router/reference.safetensors  Gemma4TextRouter's probabilities, top-k weights and
                            experts on random inputs, and its gradients (float32), and its routing
                            in bfloat16
  gemma4_done               a stamp

    python scripts/reference/gemma4_reference.py --out build/fixtures/models
"""

import argparse
import json
import os

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM, Gemma4TextConfig

import model_reference as ref

S, F = "sliding_attention", "full_attention"


def tiny_text_config(**overrides):
    kw = dict(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=5, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1,
              attention_k_eq_v=True, sliding_window=5, layer_types=[S, F, S, S, F], hidden_size_per_layer_input=0,
              final_logit_softcapping=2.0, max_position_embeddings=256, initializer_range=0.08, rms_norm_eps=1e-6)
    kw.update(overrides)
    return Gemma4TextConfig(**kw)


def randomise(model, prefix=""):
    """Gemma 4's norms (plain w, init 1) and layer_scalar (init 1) would hide a wrong formula."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith(prefix) and "norm" in name:
                p.normal_(1.0, 0.3)
        for name, b in model.named_buffers():
            if name.startswith(prefix) and name.endswith("layer_scalar"):
                b.uniform_(0.5, 1.5)


def inputs(vocab):
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(0, vocab, (2, 24), generator=gen)
    labels = ids.clone()
    labels[0, :5] = -100  # a masked prompt
    labels[1, -3:] = -100
    return ids, labels


def add_random_adapter(model, adapter_dir):
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=ref.TARGETS))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    peft_model.save_pretrained(adapter_dir)


def dense(root):
    torch.manual_seed(41)
    cfg = tiny_text_config()
    base_dir, adapter_dir = os.path.join(root, "base"), os.path.join(root, "adapter")
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    randomise(model)
    model.save_pretrained(base_dir)
    add_random_adapter(model, adapter_dir)
    ids, labels = inputs(cfg.vocab_size)
    tensors = {"ids": ids, "labels": labels}
    for quant in ref.QUANT:
        for k, v in ref.run(ref.load(base_dir, quant), ids, labels, train=False).items():
            tensors[f"{quant}.{k}"] = v
        with_adapter = PeftModel.from_pretrained(ref.load(base_dir, quant), adapter_dir, is_trainable=True)
        for k, v in ref.run(with_adapter, ids, labels, train=True).items():
            tensors[f"{quant}.lora.{k}"] = v
    return tensors


# The 26B-A4B's text keys with 8 layers and no experts, written
# by hand as the Hub file spells them (global_head_dim, num_global_key_value_heads, the last layer
# sliding in layer_types: transformers forces it to full).
HUB_TEXT = {"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "attention_k_eq_v": True,
            "enable_moe_block": False, "final_logit_softcapping": 30.0, "global_head_dim": 512, "head_dim": 256,
            "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2816, "hidden_size_per_layer_input": 0,
            "intermediate_size": 2112, "max_position_embeddings": 262144, "num_attention_heads": 16,
            "num_global_key_value_heads": 2, "num_hidden_layers": 8, "num_key_value_heads": 8,
            "num_kv_shared_layers": 0, "rms_norm_eps": 1e-06,
            "layer_types": [S, S, S, S, S, F, S, S],
            "rope_parameters": {"full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0,
                                                   "rope_type": "proportional"},
                                "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}},
            "sliding_window": 1024, "tie_word_embeddings": True, "vocab_size": 262144}


def config_cases(root):
    cases = {"gemma4_hub": HUB_TEXT}
    # Re-saved by transformers: per_layer_config {"05": {...}, "11": {...}} instead of global_head_dim;
    # no layer_types (the default 5:1 pattern) and no rope_parameters (the defaults).
    tmp = os.path.join(root, "_resave")
    Gemma4TextConfig(num_hidden_layers=12, hidden_size=128, intermediate_size=256, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=32, global_head_dim=64, num_global_key_value_heads=1,
                     attention_k_eq_v=True, hidden_size_per_layer_input=0, vocab_size=512).save_pretrained(tmp)
    with open(os.path.join(tmp, "config.json")) as f:
        resaved = json.load(f)
    assert "global_head_dim" not in resaved and "05" in resaved["per_layer_config"], resaved
    for key in ("layer_types", "rope_parameters"):
        resaved.pop(key)
    cases["gemma4_resaved"] = resaved
    # Multimodal: the decoder in text_config (k_eq_v off: full layers keep v_proj and
    # num_key_value_heads); tie_word_embeddings from the outer config.
    cases["gemma4_multimodal"] = {
        "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
        "text_config": {"model_type": "gemma4_text", "hidden_size": 256, "intermediate_size": 512,
                        "num_hidden_layers": 7, "num_attention_heads": 4, "num_key_value_heads": 2,
                        "head_dim": 64, "global_head_dim": 128, "hidden_size_per_layer_input": 0,
                        "final_logit_softcapping": 30.0, "sliding_window": 128},
        "vision_config": {"model_type": "gemma4_vision", "hidden_size": 32, "intermediate_size": 64,
                          "num_hidden_layers": 1, "num_attention_heads": 2, "head_dim": 16}}
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextRotaryEmbedding
    tensors = {}
    for name, cfg in cases.items():
        os.makedirs(os.path.join(root, name), exist_ok=True)
        with open(os.path.join(root, name, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        outer = AutoConfig.from_pretrained(os.path.join(root, name))
        text = outer.get_text_config()
        layers = [text.per_layer_config[i] for i in range(text.num_hidden_layers)]
        tensors[f"{name}.sliding"] = torch.tensor([t == S for t in text.layer_types], dtype=torch.int64)
        tensors[f"{name}.head_dim"] = torch.tensor([c.head_dim for c in layers], dtype=torch.int64)
        tensors[f"{name}.kv_heads"] = torch.tensor([c.num_key_value_heads for c in layers], dtype=torch.int64)
        tensors[f"{name}.k_eq_v"] = torch.tensor([text.attention_k_eq_v and t == F for t in text.layer_types],
                                                 dtype=torch.int64)
        tensors[f"{name}.scalars"] = torch.tensor(
            [text.sliding_window, text.final_logit_softcapping or float("nan"), text.vocab_size,
             text.num_attention_heads, float(outer.tie_word_embeddings)], dtype=torch.float64)
        rotary = Gemma4TextRotaryEmbedding(text)
        for kind in ("full", "sliding"):
            tensors[f"{name}.inv_freq.{kind}"] = getattr(rotary, f"{kind}_attention_inv_freq")
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(root, "reference.safetensors"))


def multimodal(root):
    """A tiny Gemma4ForConditionalGeneration: the dense fixture's decoder with a vision tower."""
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration
    torch.manual_seed(43)
    text = tiny_text_config()
    vision = {"model_type": "gemma4_vision", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8}
    model = Gemma4ForConditionalGeneration(Gemma4Config(text_config=text.to_dict(), vision_config=vision)).float()
    randomise(model, "model.language_model.")
    base_dir, adapter_dir = os.path.join(root, "base"), os.path.join(root, "adapter")
    model.save_pretrained(base_dir)
    # PEFT on the wrapper: the decoder's linears only (the vision tower's q_proj etc. are
    # Gemma4ClippableLinear, which PEFT refuses), named by path as PEFT matches them.
    targets = [f"language_model.layers.{i}.{'mlp' if m.endswith(('gate_proj', 'up_proj', 'down_proj')) else 'self_attn'}.{m}"
               for i in range(text.num_hidden_layers) for m in ref.TARGETS]
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    peft_model.save_pretrained(adapter_dir)
    ids, labels = inputs(text.vocab_size)
    tensors = {"ids": ids, "labels": labels}
    base = Gemma4ForConditionalGeneration.from_pretrained(base_dir, dtype=torch.float32)
    for k, v in ref.run(base, ids, labels, train=False).items():
        tensors[f"fp32.{k}"] = v
    with_adapter = PeftModel.from_pretrained(Gemma4ForConditionalGeneration.from_pretrained(base_dir,
                                                                                            dtype=torch.float32),
                                             adapter_dir, is_trainable=True)
    for k, v in ref.run(with_adapter, ids, labels, train=True).items():
        tensors[f"fp32.lora.{k}"] = v
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(root, "reference.safetensors"))


def router(root):
    """Gemma4TextRouter on random inputs and weights: probabilities, top-k weights and experts,
    and the gradients of sum(weights * g) + sum(probs * g2) for fixed random g, g2 with respect to
    x, proj, scale and per_expert_scale. float32, and bfloat16 (routing only: the top-k choice
    and weights of the same bf16 ops)."""
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextRouter
    torch.manual_seed(47)
    cfg = tiny_text_config(enable_moe_block=True, num_experts=8, top_k_experts=3, moe_intermediate_size=16)
    module = Gemma4TextRouter(cfg)
    with torch.no_grad():
        module.proj.weight.normal_(0, 0.3)
        module.scale.normal_(1.0, 0.3)
        module.per_expert_scale.uniform_(0.5, 1.5)
    x = torch.randn(40, cfg.hidden_size) * 3
    tensors = {"x": x, "proj": module.proj.weight.detach().clone(), "scale": module.scale.detach().clone(),
               "per_expert_scale": module.per_expert_scale.detach().clone(),
               "top_k": torch.tensor([cfg.top_k_experts]), "eps": torch.tensor([cfg.rms_norm_eps], dtype=torch.float64)}
    xg = x.clone().requires_grad_(True)
    probs, weights, experts = module(xg)
    g, g2 = torch.randn_like(weights), torch.randn_like(probs)
    ((weights * g).sum() + (probs * g2).sum()).backward()
    tensors.update({"fp32.probs": probs.detach(), "fp32.weights": weights.detach(), "fp32.experts": experts,
                    "g": g, "g2": g2, "grad.x": xg.grad, "grad.proj": module.proj.weight.grad.clone(),
                    "grad.scale": module.scale.grad.clone(),
                    "grad.per_expert_scale": module.per_expert_scale.grad.clone()})
    module = module.to(torch.bfloat16)  # converts the .grad tensors in place too: hence the clones
    with torch.no_grad():
        probs, weights, experts = module(x.to(torch.bfloat16))
    tensors.update({"bf16.probs": probs, "bf16.weights": weights, "bf16.experts": experts})
    os.makedirs(root, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(root, "reference.safetensors"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    config_cases(os.path.join(args.out, "gemma4_configs"))
    router(os.path.join(args.out, "gemma4_router"))
    multimodal(os.path.join(args.out, "gemma4_mm"))
    root = os.path.join(args.out, "gemma4")
    tensors = dense(root)
    ref.register_exact_int8_rescale()
    ref.int8_exact("gemma4", root, tensors)
    open(os.path.join(args.out, "gemma4_done"), "w").close()
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
