"""Reference outputs of transformers + peft + bitsandbytes (CPU, float32) for qtrain's model
parity tests.

For each architecture (llama with llama3 rope scaling, mistral with a sliding window shorter
than the sequence, qwen2 with q/k/v biases, qwen3 with q/k norms, an explicit head_dim and tied
embeddings, gemma2 and gemma3 with head_dim != hidden / heads, sliding and full layers, a window
shorter than the sequence, query_pre_attn_scalar != head_dim, random (1 + w) norms, Gemma 2's
soft-caps small enough to bite, Gemma 3's local rope and linearly scaled global rope) it writes,
under --out/<arch>/:
  base/                     the tiny random model (transformers save_pretrained, float32)
  adapter/                  a PEFT LoRA adapter on all linear layers, with random A and B
  adapter_saved/            (llama, qwen3) the same with modules_to_save: the embeddings, the head
                            and norms (SAVED_MODULES), the trained copies moved off the base
                            (qwen3's tied embedding into two copies); reference.safetensors'
                            saved.logits, saved.loss and saved.grad.<module>[.lora_A|.lora_B]
                            (model.embed_tokens, lm_head, the norms too) are for it, float32
  adapter_dora/             (llama, qwen2) a DoRA adapter (use_dora) on every linear layer, random
                            B and magnitudes off the row norms; reference.safetensors'
                            dora.<quant>.logits, .loss and .grad.<module>.lora_A|lora_B|
                            lora_magnitude_vector for it on the float32, NF4 and INT8 bases
  reference.safetensors     input ids, labels, and logits / loss / LoRA gradients for the base
                            in float32, NF4 (double quant) and INT8 (bitsandbytes), each with and
                            without the adapter; and int8_exact.*: INT8 evaluation with
                            bitsandbytes' CPU rescale constant corrected (see
                            register_exact_int8_rescale)

and two Gemma fixtures of what transformers reads from files it did not write itself:
  gemma_configs/<case>/config.json  Hub-style configs (no layer_types; transformers 4's rope_theta,
                            rope_local_base_freq, rope_scaling; a multimodal Gemma 3 whose
                            text_config holds five keys), and gemma_configs/reference.safetensors:
                            per case the layer kinds, the window, head_dim, the scalars
                            (query_pre_attn_scalar, caps, vocab, heads, tie) and the rope inv_freq
                            of each layer kind as transformers' rotary classes compute them
  gemma3_mm/base, gemma3_mm/reference.safetensors  a tiny Gemma3ForConditionalGeneration (its
                            decoder under model.language_model., a vision tower) and its text-only
                            logits and loss

    python scripts/reference/model_reference.py --out build/fixtures/models
"""

import argparse
import json
import math
import os

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch
import bnb_oracle  # noqa: F401 (bitsandbytes, the same on every CPU: see Note [bitsandbytes' CPU defects])
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, BitsAndBytesConfig
from transformers import Gemma2Config, Gemma3TextConfig, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
COMMON = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=160, max_position_embeddings=256, initializer_range=0.08,
              rms_norm_eps=1e-6)
ARCHS = {
    "llama": lambda: LlamaConfig(**COMMON, rope_parameters={
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    "mistral": lambda: MistralConfig(**COMMON, sliding_window=8),
    "qwen2": lambda: Qwen2Config(**COMMON),
    "qwen3": lambda: Qwen3Config(**COMMON, head_dim=32, tie_word_embeddings=True),
    # Gemma's defaults tie the embeddings and use gelu_pytorch_tanh. The caps are far below the
    # released 50 / 30 so that tanh is not linear on these small random activations.
    "gemma2": lambda: Gemma2Config(**COMMON, head_dim=24, query_pre_attn_scalar=20, sliding_window=6,
                                   attn_logit_softcapping=0.8, final_logit_softcapping=1.5),
    "gemma3": lambda: Gemma3TextConfig(**COMMON, head_dim=40, query_pre_attn_scalar=30, sliding_window=7,
                                       layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                       rope_parameters={
                                           "full_attention": {"rope_type": "linear", "factor": 4.0,
                                                              "rope_theta": 1e6},
                                           "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}),
}
QUANT = {
    "fp32": None,
    "nf4": BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch.float32),
    "int8": BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=6.0),
}


def load(base_dir, quant):
    kwargs = dict(dtype=torch.float32, device_map="cpu")
    if QUANT[quant] is not None:
        kwargs["quantization_config"] = QUANT[quant]
    return AutoModelForCausalLM.from_pretrained(base_dir, **kwargs)


def run(model, ids, labels, train):
    """Logits and mean loss; with train=True also the LoRA gradients of the mean loss."""
    model.train(train)
    out = model(input_ids=ids, labels=labels)
    result = {"logits": out.logits.detach(), "loss": out.loss.detach().reshape(1)}
    if train:
        out.loss.backward()
        for name, p in model.named_parameters():
            if p.requires_grad and p.grad is not None and "lora_" in name:
                # base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight -> module.lora_A
                module = name.split("base_model.model.")[1].replace(".default.weight", "")
                result["grad." + module] = p.grad.detach().clone()
            elif p.requires_grad and p.grad is not None and ".modules_to_save." in name:
                # base_model.model.lm_head.modules_to_save.default.weight -> lm_head
                module = name.split("base_model.model.")[1].split(".modules_to_save.")[0]
                result["grad." + module] = p.grad.detach().clone()
    return result


def register_exact_int8_rescale():
    """bitsandbytes' CPU backend rescales the int8 product by 6.200124e-05, a typo of 1/127^2
    (its CUDA kernel uses 6.200012e-05 = fl32(1/16129)). Evaluating LLM.int8() with the exact
    constant as well lets the tests tell that 1.8e-5 apart from real differences."""

    @torch.library.register_kernel("bitsandbytes::int8_mm_dequant", "cpu")
    def _(A, row_stats, col_stats, dtype=None, bias=None):
        out = A.view(-1, A.shape[-1]) * (row_stats.reshape(-1, 1) * col_stats.reshape(1, -1)) * (1.0 / 16129.0)
        if bias is not None:
            out += bias
        return out.to(dtype or torch.float16)


def make_arch(arch, root):
    torch.manual_seed(list(ARCHS).index(arch) + 1)
    cfg = ARCHS[arch]()
    base_dir, adapter_dir = os.path.join(root, "base"), os.path.join(root, "adapter")
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    if arch.startswith("gemma"):
        with torch.no_grad():  # Gemma initialises its (1 + w) norms to 0: make w matter
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.normal_(0, 0.2)
    model.save_pretrained(base_dir)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    peft_model.save_pretrained(adapter_dir)
    if arch in SAVED_MODULES:
        saved_modules_adapter(base_dir, os.path.join(root, "adapter_saved"), SAVED_MODULES[arch])
    if arch in DORA_ARCHS:
        dora_adapter(base_dir, os.path.join(root, "adapter_dora"))

    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(0, cfg.vocab_size, (2, 24), generator=gen)
    labels = ids.clone()
    labels[0, :5] = -100  # a masked prompt
    labels[1, -3:] = -100
    tensors = {"ids": ids, "labels": labels}
    for quant in QUANT:
        base = load(base_dir, quant)
        for k, v in run(base, ids, labels, train=False).items():
            tensors[f"{quant}.{k}"] = v
        # INT8 trains through MatMul8bitFp and evaluates through MatMul8bitLt (threshold 6):
        # adapter outputs are taken in train mode (dropout is 0), so they follow the training path.
        with_adapter = PeftModel.from_pretrained(load(base_dir, quant), adapter_dir, is_trainable=True)
        for k, v in run(with_adapter, ids, labels, train=True).items():
            tensors[f"{quant}.lora.{k}"] = v
    if arch in DORA_ARCHS:
        for quant in QUANT:
            with_dora = PeftModel.from_pretrained(load(base_dir, quant), os.path.join(root, "adapter_dora"),
                                                  is_trainable=True)
            for k, v in run(with_dora, ids, labels, train=True).items():
                tensors[f"dora.{quant}.{k}"] = v
    if arch in SAVED_MODULES:
        with_saved = PeftModel.from_pretrained(load(base_dir, "fp32"), os.path.join(root, "adapter_saved"),
                                               is_trainable=True)
        for k, v in run(with_saved, ids, labels, train=True).items():
            tensors[f"saved.{k}"] = v
    return tensors


# Untied (llama) and tied (qwen3) embeddings for the adapter with modules trained in full, with
# norms named two ways: each layer's input_layernorm and the final norm by path (llama), and every
# norm by peft's suffix rule, q_norm and k_norm included (qwen3).
SAVED_MODULES = {"llama": ["embed_tokens", "lm_head", "input_layernorm", "model.norm"],
                 "qwen3": ["embed_tokens", "lm_head", "norm"]}


def saved_modules_adapter(base_dir, adapter_dir, modules_to_save):
    """A PEFT adapter with modules_to_save beside LoRA on every linear: random B, and the trained
    copies moved off the base (on qwen3 the two copies of the tied embedding each their own way),
    so that loading them is visible."""
    torch.manual_seed(11)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS,
                                                  modules_to_save=modules_to_save))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
            if ".modules_to_save." in name:
                p.add_(torch.randn_like(p) * 0.05)
    peft_model.save_pretrained(adapter_dir)


# Plain (llama) and biased (qwen2: q/k/v biases, which DoRA takes out of the base output) layers.
DORA_ARCHS = ("llama", "qwen2")


def dora_adapter(base_dir, adapter_dir):
    """A PEFT DoRA adapter (use_dora=True) on every linear: random B, and magnitudes moved off the
    base's row norms, so that A, B and the magnitudes all matter."""
    torch.manual_seed(13)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS,
                                                  use_dora=True))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
            if "lora_magnitude_vector" in name:
                p.mul_(1 + 0.1 * torch.randn_like(p))
    peft_model.save_pretrained(adapter_dir)


def int8_exact(arch, root, tensors):
    base = load(os.path.join(root, "base"), "int8")
    for k, v in run(base, tensors["ids"], tensors["labels"], train=False).items():
        tensors[f"int8_exact.{k}"] = v
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(root, "reference.safetensors"))


# Hub-style configs, smaller. gemma2_hub: google/gemma-2-2b's keys (no layer_types, both activation
# keys); gemma3_1b: google/gemma-3-1b-pt's (rope_local_base_freq, sliding_window_pattern, no caps);
# gemma3_4b: google/gemma-3-4b-pt's multimodal config, whose text_config has five keys and takes
# the rest from Gemma3TextConfig's defaults.
GEMMA_CONFIGS = {
    "gemma2_hub": {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "attention_bias": False,
                   "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "head_dim": 256,
                   "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304,
                   "intermediate_size": 9216, "max_position_embeddings": 8192, "num_attention_heads": 8,
                   "num_hidden_layers": 5, "num_key_value_heads": 4, "query_pre_attn_scalar": 256,
                   "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "vocab_size": 256000},
    "gemma3_1b": {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "attention_bias": False,
                  "attn_logit_softcapping": None, "final_logit_softcapping": None, "head_dim": 256,
                  "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "intermediate_size": 6912,
                  "max_position_embeddings": 32768, "num_attention_heads": 4, "num_hidden_layers": 7,
                  "num_key_value_heads": 1, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
                  "rope_local_base_freq": 10000, "rope_scaling": None, "rope_theta": 1000000,
                  "sliding_window": 512, "sliding_window_pattern": 6, "vocab_size": 262144},
    "gemma3_4b": {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                  "boi_token_index": 255999, "eoi_token_index": 256000, "image_token_index": 262144,
                  "mm_tokens_per_image": 256,
                  "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                                  "num_hidden_layers": 8, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                                  "sliding_window": 1024},
                  "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                                    "model_type": "siglip_vision_model", "num_attention_heads": 16,
                                    "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False}},
}


def gemma_configs(root):
    from transformers import AutoConfig
    from transformers.models.gemma2.modeling_gemma2 import Gemma2RotaryEmbedding
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding
    tensors = {}
    for name, cfg in GEMMA_CONFIGS.items():
        os.makedirs(os.path.join(root, name), exist_ok=True)
        with open(os.path.join(root, name, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        text = AutoConfig.from_pretrained(os.path.join(root, name)).get_text_config()
        gemma2 = text.model_type == "gemma2"
        tensors[f"{name}.sliding"] = torch.tensor([t == "sliding_attention" for t in text.layer_types], dtype=torch.int64)
        tensors[f"{name}.window"] = torch.tensor([text.sliding_window], dtype=torch.int64)
        nan = float("nan")
        caps = [text.final_logit_softcapping, text.attn_logit_softcapping if gemma2 else None]
        tied = AutoConfig.from_pretrained(os.path.join(root, name)).tie_word_embeddings
        tensors[f"{name}.scalars"] = torch.tensor(
            [text.query_pre_attn_scalar] + [nan if c is None else c for c in caps] +
            [text.vocab_size, text.num_attention_heads, text.num_key_value_heads, text.head_dim, float(tied)],
            dtype=torch.float64)
        if gemma2:
            tensors[f"{name}.inv_freq.full"] = Gemma2RotaryEmbedding(text).inv_freq
            tensors[f"{name}.inv_freq.sliding"] = tensors[f"{name}.inv_freq.full"].clone()
        else:
            rotary = Gemma3RotaryEmbedding(text)
            for kind in ("full", "sliding"):
                tensors[f"{name}.inv_freq.{kind}"] = getattr(rotary, f"{kind}_attention_inv_freq")
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(root, "reference.safetensors"))


def gemma3_multimodal(root):
    """A tiny Gemma3ForConditionalGeneration: the gemma3 fixture's decoder with a vision tower."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, SiglipVisionConfig
    torch.manual_seed(11)
    text = ARCHS["gemma3"]()
    vision = SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                image_size=28, patch_size=14)
    model = Gemma3ForConditionalGeneration(Gemma3Config(text_config=text.to_dict(), vision_config=vision.to_dict(),
                                                        mm_tokens_per_image=4)).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and "language_model" in name:
                p.normal_(0, 0.2)
    model.save_pretrained(os.path.join(root, "base"))
    model = Gemma3ForConditionalGeneration.from_pretrained(os.path.join(root, "base"), dtype=torch.float32).eval()
    ids = torch.randint(0, text.vocab_size, (2, 24), generator=torch.Generator().manual_seed(7))
    labels = ids.clone()
    labels[0, :5] = -100
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels)
    save_file({"ids": ids, "labels": labels, "logits": out.logits.contiguous(), "loss": out.loss.reshape(1)},
              os.path.join(root, "reference.safetensors"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    gemma_configs(os.path.join(args.out, "gemma_configs"))
    gemma3_multimodal(os.path.join(args.out, "gemma3_mm"))
    made = {arch: make_arch(arch, os.path.join(args.out, arch)) for arch in ARCHS}
    register_exact_int8_rescale()
    for arch, tensors in made.items():
        int8_exact(arch, os.path.join(args.out, arch), tensors)
        print(f"wrote {args.out}/{arch}", flush=True)
    open(os.path.join(args.out, "done"), "w").close()


if __name__ == "__main__":
    main()
