"""axolotl's new tokens on a Hugging Face model folder, as its loaders do them (transformers 5 +
tokenizers, float32, CPU), for qtrain's run-vocabulary parity tests.

The tokenizer gets special_tokens' entries (bos, eos, pad, unk, in that order; add_special_tokens)
and then `tokens` (add_tokens), each as AddedToken(token, rstrip=False, lstrip=False,
normalized=False); the model's embeddings grow to len(tokenizer) (rounded up to 32 with to_32x)
where they have fewer rows, by resize_token_embeddings(rows, mean_resizing=...) right after
torch.manual_seed(seed). With "adapter", that PEFT adapter is loaded on the resized model and
the loss on "inputs" (a safetensors file of "ids" and "labels") is computed. With
"saved_tokenizer", the tokenizer that folder holds (one qtrain wrote with the run's tokens) is
loaded as it is, adding nothing, and its size, ids and roles are reported too.

    python scripts/reference/new_tokens_reference.py MODEL_DIR SETTINGS.json OUT_DIR

SETTINGS.json: {"tokens": [...], "special_tokens": {...}, "seed": 3, "mean_resizing": false,
"to_32x": false, "texts": [...], "adapter": DIR (optional), "inputs": FILE (optional),
"saved_tokenizer": DIR (optional)}.
Writes OUT_DIR/result.json ({"len", "rows", "ids": [per text], "loss", "saved": {"len", "ids",
"eos_token", "pad_token"}}) and
OUT_DIR/embeddings.safetensors ("embed", "head").
"""

import json
import math
import os
import sys

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from safetensors.torch import load_file, save_file
from transformers import AddedToken, AutoModelForCausalLM, AutoTokenizer


def main():
    model_dir, settings_path, out_dir = sys.argv[1:4]
    s = json.load(open(settings_path))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    special = s.get("special_tokens", {})
    for role in ("bos_token", "eos_token", "pad_token", "unk_token"):
        if special.get(role):
            tokenizer.add_special_tokens({role: AddedToken(special[role], rstrip=False, lstrip=False, normalized=False)})
    if s.get("tokens"):
        tokenizer.add_tokens([AddedToken(t, rstrip=False, lstrip=False, normalized=False) for t in s["tokens"]])
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, device_map="cpu").eval()
    rows = math.ceil(len(tokenizer) / 32) * 32 if s.get("to_32x") else len(tokenizer)
    if model.get_input_embeddings().num_embeddings < rows:
        torch.manual_seed(s["seed"])
        model.resize_token_embeddings(rows, mean_resizing=s.get("mean_resizing", False))
    result = {
        "len": len(tokenizer),
        "rows": model.get_input_embeddings().num_embeddings,
        "ids": [tokenizer(t, add_special_tokens=False)["input_ids"] for t in s.get("texts", [])],
    }
    if s.get("saved_tokenizer"):
        saved = AutoTokenizer.from_pretrained(s["saved_tokenizer"])
        result["saved"] = {
            "len": len(saved),
            "ids": [saved(t, add_special_tokens=False)["input_ids"] for t in s.get("texts", [])],
            "eos_token": saved.eos_token,
            "pad_token": saved.pad_token,
        }
    os.makedirs(out_dir, exist_ok=True)
    save_file({"embed": model.get_input_embeddings().weight.detach().contiguous(),
               "head": model.get_output_embeddings().weight.detach().clone()},
              os.path.join(out_dir, "embeddings.safetensors"))
    if s.get("adapter"):
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, s["adapter"]).eval()
        inputs = load_file(s["inputs"])
        with torch.no_grad():
            result["loss"] = model(input_ids=inputs["ids"], labels=inputs["labels"]).loss.item()
    json.dump(result, open(os.path.join(out_dir, "result.json"), "w"))


if __name__ == "__main__":
    main()
