"""Reference outputs of transformers + peft + bitsandbytes (CPU, float32) for qtrain's model
parity tests.

For each architecture (llama with llama3 rope scaling, mistral with a sliding window shorter
than the sequence, qwen2 with q/k/v biases, qwen3 with q/k norms, an explicit head_dim and tied
embeddings) it writes, under --out/<arch>/:
  base/                     the tiny random model (transformers save_pretrained, float32)
  adapter/                  a PEFT LoRA adapter on all linear layers, with random A and B
  reference.safetensors     input ids, labels, and logits / loss / LoRA gradients for the base
                            in float32, NF4 (double quant) and INT8 (bitsandbytes), each with and
                            without the adapter; and int8_exact.*: INT8 evaluation with
                            bitsandbytes' CPU rescale constant corrected (see
                            register_exact_int8_rescale)

    python scripts/reference/model_reference.py --out build/fixtures/models
"""

import argparse
import os

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch
import bnb_oracle  # noqa: F401 (bitsandbytes, the same on every CPU: see Note [bitsandbytes' CPU defects])
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, BitsAndBytesConfig
from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

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
    model.save_pretrained(base_dir)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    peft_model.save_pretrained(adapter_dir)

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
    return tensors


def int8_exact(arch, root, tensors):
    base = load(os.path.join(root, "base"), "int8")
    for k, v in run(base, tensors["ids"], tensors["labels"], train=False).items():
        tensors[f"int8_exact.{k}"] = v
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(root, "reference.safetensors"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    made = {arch: make_arch(arch, os.path.join(args.out, arch)) for arch in ARCHS}
    register_exact_int8_rescale()
    for arch, tensors in made.items():
        int8_exact(arch, os.path.join(args.out, arch), tensors)
        print(f"wrote {args.out}/{arch}", flush=True)
    open(os.path.join(args.out, "done"), "w").close()


if __name__ == "__main__":
    main()
