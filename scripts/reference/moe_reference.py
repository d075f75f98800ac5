"""Reference outputs of transformers + peft (CPU, float32) for qtrain's mixture-of-experts parity
tests: tiny Qwen3-MoE and Mixtral models with awkward shapes.

Cases (under --out/<case>/):
  qwen3_moe     8 experts, top-2, norm_topk_prob false, layer 1 dense (mlp_only_layers), a dense
                intermediate_size unlike moe_intermediate_size; saved with per-expert keys
                (transformers' default save_original_format=True)
  qwen3_moe_fused  8 experts, top-3, norm_topk_prob true, decoder_sparse_step 2 (layers 0 and 2
                dense); saved with the fused 3-D keys (save_original_format=False)
  mixtral       8 experts, top-3 (always renormalised, fp32 weights), block_sparse_moe.* keys,
                a sliding window shorter than the sequence
  gemma4_moe    gemma4_text with enable_moe_block: 5 layers (sliding, full, sliding, sliding,
                full; k_eq_v full layers), 6 experts top-3 beside the dense MLP on every layer,
                odd widths (hidden 48, moe_intermediate_size 20, intermediate_size 72); random
                norms (the three MoE ones too), layer_scalar, router scale and per_expert_scale;
                experts at layers.N.experts (fused keys: transformers writes no other form). Its
                adapters also target the dense MLP; target_parameters are experts.gate_up_proj
                and experts.down_proj. No aux loss (Gemma 4 has none); short_ids is [1, 1]
Each holds:
  base/               the tiny random model (save_pretrained, float32)
  adapter_attn/       a PEFT adapter on the attention projections only, random A and B
  adapter/            a PEFT adapter on the attention projections and, through target_parameters,
                      on mlp.experts.gate_up_proj and mlp.experts.down_proj, random A and B
  reference.safetensors:
    ids [2, 24], labels      every expert of every sparse layer is touched by these
    short_ids [1, 2]         a sequence that touches at most 2 * top_k experts per layer
    base.logits, base.loss, base.topk.<layer> (int64 [tokens, top_k], sorted as torch.topk),
    short.logits, short.topk.<layer>, base.aux_loss (load_balancing_loss_func over the sparse
    layers), base.loss_with_aux (the loss with output_router_logits=True)
    aux.loss, aux.aux_loss, aux.grad.<module>.lora_A|lora_B   with adapter (train mode) and
                      output_router_logits: the loss with the aux loss, the aux loss, and the LoRA
                      gradients of the aux loss alone
    auxpad.*, auxpad.mask    the same with an attention_mask that pads the end of row 1
    attn.logits, attn.loss, attn.grad.<module>.lora_A|lora_B    with adapter_attn (train mode)
    bf16.logits, bf16.loss, bf16.topk.<layer>   the base loaded in bfloat16, experts_implementation
                      "eager" (logits bfloat16, the loss over them in float32)
    lora.logits, lora.loss, lora.grad.<module>.lora_A|lora_B    with adapter
    gate_up.logits, gate_up.loss, gate_up.grad.*   (qwen3_moe only) with adapter_gate_up/: the
                      experts' gate_up_proj alone (one ParamWrapper, saved as "...mlp.experts")
    all.logits, all.loss, all.grad.*   with adapter_all/: peft's target_modules="all-linear", which
                      on Gemma 4 adapts every nn.Linear but lm_head (router.proj too, the experts
                      not) and on Qwen3-MoE and Mixtral the attention, the router (gate.weight)
                      and both experts' parameters, gate_up_proj at twice r and alpha (peft's
                      _convert_peft_config_moe; Qwen3-MoE's dense layer gets none)
    pattern.logits, pattern.loss, pattern.grad.*   (qwen3_moe only) with adapter_pattern/: adapter/'s
                      targets with per-module ranks and alphas (rank_pattern, alpha_pattern; the
                      experts' gate_up_proj doubled as peft's own conversion does, q_proj and one
                      o_proj at other ranks, k_proj at another alpha)
and for qwen3_moe and gemma4_moe, per-expert quantization (transformers leaves 3-D experts unquantized, so
it is no oracle there): for each sparse layer L and expert e, bitsandbytes quantizing that
expert's slice alone, gate_up [2I, H] (gate rows, then up) and down [H, I]:
    q.<L>.<e>.<gate_up|down>.<nf4|fp4>.*   packed, qabsmax, absmax2, offset (double quant, blocks of 64)
    q.<L>.<e>.<gate_up|down>.int8.cb|scb   Int8Params' CB and SCB (the weight rounded to fp16 first)
    nf4.logits, nf4.loss   transformers with load_in_4bit (NF4, double quant) and each expert's
                           weights replaced by its dequantized per-slice NF4 bytes (Gemma 4's
                           router.proj kept float, llm_int8_skip_modules: qtrain never quantizes a
                           router, transformers would)
    bnb4.logits, bnb4.loss (gemma4_moe only) transformers' load_in_4bit model as is (router.proj
                           in NF4, experts float), saved as bnb4/

    python scripts/reference/moe_reference.py --out build/fixtures/moe
"""

import argparse
import os

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch
from bnb_oracle import F, quant_state_tensors  # bitsandbytes, the same on every CPU
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Gemma4TextConfig, MixtralConfig, Qwen3MoeConfig

ATTN = ["q_proj", "k_proj", "v_proj", "o_proj"]
EXPERTS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
SLIDING, FULL = "sliding_attention", "full_attention"
COMMON = dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, vocab_size=160,
              max_position_embeddings=256, initializer_range=0.08, rms_norm_eps=1e-6, num_experts_per_tok=2)
CASES = {
    "qwen3_moe": lambda: Qwen3MoeConfig(**COMMON, head_dim=24, intermediate_size=96, moe_intermediate_size=32,
                                        num_experts=8, norm_topk_prob=False, mlp_only_layers=[1]),
    "qwen3_moe_fused": lambda: Qwen3MoeConfig(**{**COMMON, "num_experts_per_tok": 3}, intermediate_size=80,
                                              moe_intermediate_size=40, num_experts=8, norm_topk_prob=True,
                                              decoder_sparse_step=2, tie_word_embeddings=True),
    "mixtral": lambda: MixtralConfig(**{**COMMON, "num_experts_per_tok": 3}, intermediate_size=48,
                                     num_local_experts=8, sliding_window=8),
    "gemma4_moe": lambda: Gemma4TextConfig(
        vocab_size=160, hidden_size=48, intermediate_size=72, num_hidden_layers=5, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1, attention_k_eq_v=True,
        sliding_window=5, layer_types=[SLIDING, FULL, SLIDING, SLIDING, FULL], hidden_size_per_layer_input=0, final_logit_softcapping=5.0,
        max_position_embeddings=256, initializer_range=0.08, rms_norm_eps=1e-6, enable_moe_block=True,
        num_experts=6, top_k_experts=3, moe_intermediate_size=20),
}


def is_gemma4(model):
    return model.config.model_type == "gemma4_text"


def experts_of(layer):
    return layer.experts if hasattr(layer, "experts") else layer.mlp.experts


def num_experts(cfg):
    return getattr(cfg, "num_experts", None) or cfg.num_local_experts


def top_k(cfg):
    return getattr(cfg, "top_k_experts", None) or cfg.num_experts_per_tok


def chosen(model, router_logits, k):
    """The experts of each token: Gemma 4 records probabilities, the others logits."""
    probs = router_logits.float() if is_gemma4(model) else torch.softmax(router_logits.float(), -1)
    return torch.topk(probs, k, -1).indices


def sparse_layers(model):
    return [i for i, layer in enumerate(model.model.layers) if hasattr(layer, "experts") or hasattr(layer.mlp, "experts")]


def run(model, ids, labels, prefix, train, out):
    model.train(train)
    res = model(input_ids=ids, labels=labels, output_router_logits=True)
    out[prefix + "logits"] = res.logits.detach()
    if labels is not None:
        # With output_router_logits the loss includes the aux loss; the plain CE is recomputed.
        ce = torch.nn.functional.cross_entropy(res.logits[:, :-1].reshape(-1, res.logits.size(-1)).float(),
                                               labels[:, 1:].reshape(-1), ignore_index=-100)
        out[prefix + "loss"] = ce.detach().reshape(1)
        if train:
            ce.backward()
            for name, p in model.named_parameters():
                if p.requires_grad and p.grad is not None and "lora_" in name:
                    module = name.split("base_model.model.")[1].replace(".default.weight", "")
                    out[prefix + "grad." + module] = p.grad.detach().clone()
    return res


def make_case(name, root):
    torch.manual_seed(list(CASES).index(name) + 21)
    cfg = CASES[name]()
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():  # norms at 1 hide a mixed-up norm: make them matter
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.normal_(1.0, 0.2)
            if "mlp.gate.weight" in pname or "router.proj" in pname:  # a decisive router, as a trained one is
                p.normal_(0, 0.5)
            if "router.scale" in pname:
                p.normal_(1.0, 0.3)
            if "per_expert_scale" in pname:
                p.uniform_(0.5, 1.5)
        for bname, b in model.named_buffers():
            if bname.endswith("layer_scalar"):
                b.uniform_(0.5, 1.5)
    gemma4 = is_gemma4(model)
    base_dir = os.path.join(root, "base")
    model.save_pretrained(base_dir, save_original_format=not name.endswith("_fused"))

    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(0, cfg.vocab_size, (2, 24), generator=gen)
    labels = ids.clone()
    labels[0, :5] = -100
    labels[1, -3:] = -100
    short_ids = torch.randint(0, cfg.vocab_size, (1, 1 if gemma4 else 2), generator=gen)
    out = {"ids": ids, "labels": labels, "short_ids": short_ids}

    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    k = top_k(cfg)
    with torch.no_grad():
        res = run(base, ids, labels, "base.", False, out)
        layers = sparse_layers(base)
        assert len(res.router_logits) == len(layers)
        for i, logits in zip(layers, res.router_logits):
            topk = chosen(base, logits, k)
            out[f"base.topk.{i}"] = topk
            assert topk.unique().numel() == num_experts(cfg), f"{name} layer {i}: not every expert is touched"
        if not gemma4:
            out["base.aux_loss"] = res.aux_loss.reshape(1)
            res_aux = base(input_ids=ids, labels=labels, output_router_logits=True)
            coef = base.config.router_aux_loss_coef
            out["base.loss_with_aux"] = res_aux.loss.reshape(1)
            out["base.aux_coef"] = torch.tensor([coef], dtype=torch.float64)
        short = base(input_ids=short_ids, output_router_logits=True)
        out["short.logits"] = short.logits
        for i, logits in zip(layers, short.router_logits):
            out[f"short.topk.{i}"] = chosen(base, logits, k)

    # The same model in bfloat16 (bf16 weights and compute). The experts run transformers' eager
    # loop: its default grouped_mm kernel refuses rows that are not 16-byte aligned, and these
    # fixtures' odd widths are not (hidden 48, moe_intermediate_size 20 in bf16).
    bf16 = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.bfloat16, experts_implementation="eager").eval()
    with torch.no_grad():
        res = run(bf16, ids, labels, "bf16.", False, out)
        for i, logits in zip(sparse_layers(bf16), res.router_logits):
            out[f"bf16.topk.{i}"] = chosen(bf16, logits, k)

    # Gemma 4: the dense MLP beside the experts too; its experts have no mlp. level.
    modules = ATTN + (["gate_proj", "up_proj", "down_proj"] if gemma4 else [])
    experts = [e.removeprefix("mlp.") for e in EXPERTS] if gemma4 else EXPERTS
    adapters = [("adapter_attn", "attn.", {}), ("adapter", "lora.", {"target_parameters": experts}),
                ("adapter_all", "all.", {"target_modules": "all-linear"})]
    if name == "qwen3_moe":
        adapters.append(("adapter_gate_up", "gate_up.", {"target_parameters": EXPERTS[:1]}))
        adapters.append(("adapter_pattern", "pattern.", {
            "target_parameters": experts,
            "rank_pattern": {r".*\.gate_up_proj": 8, "q_proj": 2, "layers.2.self_attn.o_proj": 6},
            "alpha_pattern": {r".*\.gate_up_proj": 16, "k_proj": 3}}))
    for adapter, prefix, targets in adapters:
        torch.manual_seed(5)
        model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                      **({"target_modules": modules} | targets)))
        with torch.no_grad():
            for pname, p in peft_model.named_parameters():
                if "lora_B" in pname:
                    p.normal_(0, 0.05)
        peft_model.save_pretrained(os.path.join(root, adapter))
        loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32),
                                           os.path.join(root, adapter), is_trainable=True)
        run(loaded, ids, labels, prefix, True, out)
    if not gemma4:  # transformers' Gemma 4 has no load-balancing loss
        load_balancing(base_dir, os.path.join(root, "adapter"), ids, labels, out)
    if name in ("qwen3_moe", "gemma4_moe"):
        quantized_experts(base_dir, ids, labels, out)
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(root, "reference.safetensors"))


def load_balancing(base_dir, adapter_dir, ids, labels, out):
    """The load-balancing loss with the attention + expert adapter, in train mode, without and with
    padding (the last 3 tokens of row 1 masked out; their labels are -100 already): the loss as
    the model returns it with output_router_logits (CE + coef * aux), aux alone, and the LoRA
    gradients of aux alone (at the default coefficient they would be lost in the CE's)."""
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0
    for prefix, attention_mask in (("aux.", None), ("auxpad.", mask)):
        torch.manual_seed(5)
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32),
                                          adapter_dir, is_trainable=True)
        model.train()
        res = model(input_ids=ids, attention_mask=attention_mask, labels=labels, output_router_logits=True)
        out[prefix + "loss"] = res.loss.detach().reshape(1)
        out[prefix + "aux_loss"] = res.aux_loss.detach().reshape(1)
        res.aux_loss.backward()
        for pname, p in model.named_parameters():
            if p.requires_grad and p.grad is not None and "lora_" in pname:
                module = pname.split("base_model.model.")[1].replace(".default.weight", "")
                out[prefix + "grad." + module] = p.grad.detach().clone()
    out["auxpad.mask"] = mask


def quantized_experts(base_dir, ids, labels, out):
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    skip = {"llm_int8_skip_modules": ["router.proj", "lm_head"]} if is_gemma4(base) else {}
    nf4 = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, device_map="cpu",
                                               quantization_config=BitsAndBytesConfig(
                                                   load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                   bnb_4bit_use_double_quant=True,
                                                   bnb_4bit_compute_dtype=torch.float32, **skip)).eval()
    if is_gemma4(base):
        assert all(type(layer.router.proj) is torch.nn.Linear for layer in nf4.model.layers)
        assert type(nf4.model.layers[0].mlp.gate_proj) is not torch.nn.Linear
    for i in sparse_layers(base):
        experts, into = experts_of(base.model.layers[i]), experts_of(nf4.model.layers[i])
        for e in range(experts.gate_up_proj.shape[0]):
            for part in ("gate_up", "down"):
                w = getattr(experts, part + "_proj")[e].detach().contiguous()
                p = f"q.{i}.{e}.{part}."
                for qt in ("nf4", "fp4"):
                    packed, qs = F.quantize_4bit(w, blocksize=64, quant_type=qt, compress_statistics=True)
                    out[p + qt + ".packed"] = packed
                    out.update(quant_state_tensors(p + qt + ".", qs))
                    if qt == "nf4":
                        with torch.no_grad():
                            getattr(into, part + "_proj")[e].copy_(F.dequantize_4bit(packed, qs))
                cb, scb, _ = F.int8_vectorwise_quant(w.half())
                out[p + "int8.cb"], out[p + "int8.scb"] = cb, scb
    with torch.no_grad():
        res = nf4(input_ids=ids, labels=labels)
    out["nf4.logits"], out["nf4.loss"] = res.logits, res.loss.reshape(1)
    if is_gemma4(base):
        # transformers' own load_in_4bit, saved: router.proj in NF4 (an nn.Linear), the 3-D experts
        # float. qtrain dequantizes such a router on load.
        bnb4 = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, device_map="cpu",
                                                    quantization_config=BitsAndBytesConfig(
                                                        load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                        bnb_4bit_use_double_quant=True,
                                                        bnb_4bit_compute_dtype=torch.float32)).eval()
        assert type(bnb4.model.layers[0].router.proj) is not torch.nn.Linear
        bnb4.save_pretrained(os.path.join(os.path.dirname(base_dir), "bnb4"))
        with torch.no_grad():
            res = bnb4(input_ids=ids, labels=labels)
        out["bnb4.logits"], out["bnb4.loss"] = res.logits, res.loss.reshape(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", nargs="*", help="only these cases (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in args.cases or CASES:
        make_case(name, os.path.join(args.out, name))
        print(f"wrote {args.out}/{name}", flush=True)
    open(os.path.join(args.out, "done"), "w").close()


if __name__ == "__main__":
    main()
