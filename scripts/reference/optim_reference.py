"""What torch and transformers do for qtrain's optimizer step: AdamW, gradient clipping and the
learning-rate schedules, as the Hugging Face Trainer runs them (float32, CPU).

    python scripts/reference/optim_reference.py adamw --out ADAMW.safetensors
    python scripts/reference/optim_reference.py schedules --out SCHEDULES.safetensors
    python scripts/reference/optim_reference.py adamw8bit --out ADAMW8BIT.safetensors

adamw: 25 steps of torch.optim.AdamW (single-tensor path) on three parameters, each step
clip_grad_norm_(1.0) first and the learning rate from a cosine-with-warmup LambdaLR. Writes
init.<i>, grad.<step>.<i> (before clipping), lrs (float64 [25]), norms (float32 [25]),
param.<step>.<i> (after the step), final.<i>, exp_avg.<i>, exp_avg_sq.<i> and step.

schedules: the learning rate of each of 22 optimizer steps (2 past the end of training) for
transformers' constant_with_warmup, linear and cosine schedules over 20 steps, with 0 and 3
warmup steps and a warmup ratio of 0.1 (TrainingArguments.get_warmup_steps). Writes
lr.<schedule>.<case> (float64 [22]) and warmup.<case> (int64 0-dim), case = w0 | w3 | r0.1.

adamw8bit: 8 steps of bitsandbytes.optim.AdamW8bit on the CPU (bitsandbytes' own CPU backend,
the oracle of qtrain's AdamW8bit) on parameters above, at and below min_8bit_size = 4096
elements, with partial state blocks of 256, weight decay and a new learning rate each step.
Writes init.<i>, grad.<step>.<i>, lrs (float64 [8]), param.<step>.<i> (after the step) and the
final state: state1.<i>, state2.<i> (uint8 codes, or float32 for small parameters),
absmax1.<i>, absmax2.<i> (8-bit ones only), qmap1, qmap2 and step.

The subcommands are separate so that each test pays only for the imports it needs.
"""

import argparse
import functools
import math
import os

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import torch
from safetensors.torch import save_file

SHAPES = [(4, 8), (16,), (3, 3, 3)]
ADAMW_STEPS = 25
ADAMW_WARMUP = 3
BASE_LR = 1e-3

SCHEDULE_TOTAL = 20
SCHEDULE_RECORDED = 22
SCHEDULE_BASE_LR = 2e-4
# qtrain's schedule names -> the Trainer's lr_scheduler_type that behaves so with warmup.
SCHEDULES = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}
WARMUP_CASES = {"w0": 0, "w3": 3, "r0.1": 0.1}


# transformers' _get_cosine_schedule_with_warmup_lr_lambda, num_cycles=0.5, copied so that this
# subcommand needs torch only; the schedules subcommand checks the C++ side against transformers.
def cosine_lambda(current_step, *, num_warmup_steps, num_training_steps, num_cycles=0.5):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))


def adamw(out):
    torch.manual_seed(0)
    params = [torch.randn(shape, dtype=torch.float32).requires_grad_(True) for shape in SHAPES]
    tensors = {f"init.{i}": p.detach().clone() for i, p in enumerate(params)}
    optimizer = torch.optim.AdamW(
        params,
        lr=BASE_LR,
        betas=(0.9, 0.95),
        eps=1e-8,
        weight_decay=0.1,
        foreach=False,
        fused=False,
        capturable=False,
        amsgrad=False,
        maximize=False,
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        functools.partial(cosine_lambda, num_warmup_steps=ADAMW_WARMUP, num_training_steps=ADAMW_STEPS),
    )
    gen = torch.Generator().manual_seed(1234)
    lrs, norms = [], []
    for step in range(ADAMW_STEPS):
        # Every third step small gradients (total norm < 1, so clipping leaves them alone).
        scale = 0.05 if step % 3 == 0 else 1.0
        for i, p in enumerate(params):
            p.grad = torch.randn(p.shape, generator=gen, dtype=torch.float32) * scale
            tensors[f"grad.{step}.{i}"] = p.grad.clone()
        norms.append(torch.nn.utils.clip_grad_norm_(params, 1.0, norm_type=2.0, foreach=False).reshape(()))
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
        for i, p in enumerate(params):
            tensors[f"param.{step}.{i}"] = p.detach().clone()
    for i, p in enumerate(params):
        state = optimizer.state[p]
        tensors[f"final.{i}"] = p.detach().clone()
        tensors[f"exp_avg.{i}"] = state["exp_avg"].clone()
        tensors[f"exp_avg_sq.{i}"] = state["exp_avg_sq"].clone()
        tensors["step"] = state["step"].clone()
    tensors["lrs"] = torch.tensor(lrs, dtype=torch.float64)
    tensors["norms"] = torch.stack(norms)
    save_file(tensors, out, metadata={"format": "pt"})


ADAMW8BIT_SHAPES = [(64, 80), (4100,), (16, 256), (40, 100), (16,)]
ADAMW8BIT_STEPS = 8


def adamw8bit(out):
    import bitsandbytes as bnb

    torch.manual_seed(0)
    params = [torch.randn(shape, dtype=torch.float32).requires_grad_(True) for shape in ADAMW8BIT_SHAPES]
    tensors = {f"init.{i}": p.detach().clone() for i, p in enumerate(params)}
    optimizer = bnb.optim.AdamW8bit(params, lr=BASE_LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
    gen = torch.Generator().manual_seed(4321)
    lrs = []
    for step in range(ADAMW8BIT_STEPS):
        # Gradient scales that change per step and per parameter, so that block absmax move.
        scale = [1.0, 0.01, 3.0, 0.3][step % 4]
        for i, p in enumerate(params):
            p.grad = torch.randn(p.shape, generator=gen, dtype=torch.float32) * scale
            tensors[f"grad.{step}.{i}"] = p.grad.clone()
        lr = BASE_LR * (1.0 - step / (2 * ADAMW8BIT_STEPS))
        for group in optimizer.param_groups:
            group["lr"] = lr
        lrs.append(lr)
        optimizer.step()
        for i, p in enumerate(params):
            tensors[f"param.{step}.{i}"] = p.detach().clone()
    for i, p in enumerate(params):
        state = optimizer.state[p]
        for key in ("state1", "state2", "absmax1", "absmax2"):
            if key in state:
                tensors[f"{key}.{i}"] = state[key].clone()
        tensors["qmap1"] = optimizer.name2qmap["dynamic"].clone()
        tensors["qmap2"] = optimizer.name2qmap["udynamic"].clone()
        tensors["step"] = torch.tensor(state["step"], dtype=torch.int64)
    tensors["lrs"] = torch.tensor(lrs, dtype=torch.float64)
    save_file(tensors, out, metadata={"format": "pt"})


def schedules(out):
    from types import SimpleNamespace

    from transformers.optimization import get_scheduler
    from transformers.training_args import TrainingArguments

    tensors = {}
    for case, warmup_arg in WARMUP_CASES.items():
        # The Trainer's own conversion of warmup_steps (a count, or a ratio below 1).
        warmup = TrainingArguments.get_warmup_steps(SimpleNamespace(warmup_steps=warmup_arg), SCHEDULE_TOTAL)
        tensors[f"warmup.{case}"] = torch.tensor(warmup, dtype=torch.int64)
        for ours, theirs in SCHEDULES.items():
            param = torch.zeros(1, requires_grad=True)
            optimizer = torch.optim.AdamW([param], lr=SCHEDULE_BASE_LR)
            schedule = get_scheduler(
                theirs, optimizer, num_warmup_steps=warmup, num_training_steps=SCHEDULE_TOTAL
            )
            lrs = []
            for _ in range(SCHEDULE_RECORDED):
                lrs.append(optimizer.param_groups[0]["lr"])
                optimizer.step()  # no grad: a no-op that keeps LambdaLR's order check quiet
                schedule.step()
            tensors[f"lr.{ours}.{case}"] = torch.tensor(lrs, dtype=torch.float64)
    save_file(tensors, out, metadata={"format": "pt"})


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["adamw", "schedules", "adamw8bit"])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    {"adamw": adamw, "schedules": schedules, "adamw8bit": adamw8bit}[args.what](args.out)


if __name__ == "__main__":
    main()
