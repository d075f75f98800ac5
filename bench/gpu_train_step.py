"""QLoRA training throughput and peak GPU memory: qtrain vs transformers + peft + bitsandbytes,
same model, same data, same settings, in the same run.

    python bench/gpu_train_step.py --build build [--preset llama3-8b]
        [--seq 2048] [--steps 12] [--device cuda]

Model: `qtrain init-model --arch llama --preset llama3-8b --dtype bf16` (Llama-3-8B shapes, random
weights, made on first use in bench-models/). Both engines: NF4 + double quantization, bf16
compute, LoRA r=16 alpha=32 dropout 0 on all linear layers, micro-batch 1 of `--seq` tokens,
gradient checkpointing on (transformers: model.train() first, then
gradient_checkpointing_enable(use_reentrant=True) and enable_input_require_grads(), the order
that works), AdamW, gradients clipped to norm 1 (qtrain's default max_grad_norm). tokens/s is
the median over the steps after the first 3; peak memory is the CUDA caching allocator's peak of
allocated bytes over the training steps (torch.cuda.max_memory_allocated after
reset_peak_memory_stats / qtrain's peak_memory_bytes, which restarts once the model is loaded),
model load excluded for both. `python` is the venv's here (~/.cache/qtrain/venv/bin/python) and
python3 on a GPU machine; scripts/gpu_check.sh runs this with Llama-3.2-1B's shapes. Target (issue 5): qtrain >= 1.5x the
tokens/s at no more peak memory. `--preset tiny --device cpu --steps 3` checks the script itself
on a machine without a GPU (numbers meaningless there).
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qtrain_bench  # noqa: E402

HF_TRAIN = r"""
import json, sys, time, statistics
import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig
from peft import LoraConfig, get_peft_model
model_dir, data, seq, steps, device = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
cuda = device.startswith("cuda")
dtype = torch.bfloat16 if cuda else torch.float32
q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                       bnb_4bit_compute_dtype=dtype)
model = AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=q, dtype=dtype, device_map=device)
model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0))
model.train()
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
model.enable_input_require_grads()
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-4)
rows = [json.loads(l)["input_ids"] for l in open(data)]
if cuda: torch.cuda.reset_peak_memory_stats()  # the steps' peak, as qtrain's (loading excluded)
tps = []
for step in range(steps):
    ids = torch.tensor([rows[step % len(rows)]], device=device)
    if cuda: torch.cuda.synchronize()
    t0 = time.perf_counter()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step(); opt.zero_grad(set_to_none=True)
    if cuda: torch.cuda.synchronize()
    tps.append(ids.numel() / (time.perf_counter() - t0))
peak = torch.cuda.max_memory_allocated() if cuda else -1
print(json.dumps({"tokens_per_second": tps, "peak_memory_bytes": peak, "loss": loss.item()}))
"""


def main():
    a = qtrain_bench.arg_parser(__doc__, steps=12).parse_args()
    qtrain, model, _, work, data = qtrain_bench.setup(a, "gpu_train_step")

    print("[bench] qtrain ...", flush=True)
    rows, _ = qtrain_bench.run_qtrain(qtrain, os.path.join(work, "qtrain"), model, data, a.seq, a.steps, a.device)
    q_tps = qtrain_bench.steady([r["tokens_per_second"] for r in rows], 3)
    q_peak = max(r["peak_memory_bytes"] for r in rows)
    q_planned = max(r.get("planned_peak_bytes", -1) for r in rows)

    print("[bench] transformers + peft + bitsandbytes ...", flush=True)
    res = subprocess.run([sys.executable, "-c", HF_TRAIN, model, data, str(a.seq), str(a.steps), a.device],
                         capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"the reference run failed:\n{res.stderr[-3000:]}")
    ref = json.loads(res.stdout.strip().splitlines()[-1])
    r_tps = qtrain_bench.steady(ref["tokens_per_second"], 3)
    r_peak = ref["peak_memory_bytes"]

    gib = 1 << 30
    print(f"\n{a.preset}, seq {a.seq}, {a.steps} steps, {a.device}\n")
    print("| engine | tokens/s | peak GiB |")
    print("|---|---|---|")
    print(f"| qtrain | {q_tps:.0f} | {q_peak / gib:.2f} |")
    print(f"| transformers+peft+bitsandbytes | {r_tps:.0f} | {r_peak / gib:.2f} |")
    print(f"\ntokens/s ratio qtrain / reference: {q_tps / r_tps:.2f} (target >= 1.5); "
          f"peak ratio: {q_peak / r_peak if r_peak > 0 else float('nan'):.2f} (target <= 1.0)")
    if q_planned > 0 and q_peak > 0:
        print(f"qtrain's memory plan counted {q_planned / gib:.2f} GiB for its peak: {q_planned / q_peak:.2f}x the "
              "measured (at least 1 is the plan's promise)")


if __name__ == "__main__":
    main()
