"""Reference outputs of bitsandbytes (CPU backend) for qtrain's quantization parity tests.

Writes one safetensors file: the inputs and what bitsandbytes 0.50 makes of them, case by case,
with the case list as JSON in the file's metadata. tests/ops/quant/*_test.cpp quantize the same
inputs with qtrain and compare. Runs in the venv made by scripts/setup.sh:

    python scripts/reference/bnb_quant_reference.py --out build/fixtures/bnb_reference.safetensors
"""

import argparse
import json
import os

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # the reference needs no compiled kernels

import torch
from bnb_oracle import bnb, F, quant_state_tensors  # bitsandbytes, the same on every CPU: see Note [bitsandbytes' CPU defects]
from bitsandbytes.autograd._functions import MatMul8bitFp, MatMul8bitLt, MatmulLtState
from safetensors.torch import save_file

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
BLOCKSIZES = [32, 64, 128, 256, 512, 1024, 2048, 4096]
# Sizes: tiny, odd, one block exactly, one element past a block, non-multiples of every
# blocksize, and 2-D weight shapes.
SHAPES = [[1], [7], [64], [65], [1001], [4096 + 33], [3, 4097], [48, 96], [130, 257]]


def irregular(shape, gen):
    """Gaussian values whose scale changes from block to block, with an all-zero stretch and a
    few large outliers, so blocks do not normalise to the same pattern."""
    n = 1
    for s in shape:
        n *= s
    x = torch.randn(n, generator=gen)
    scale = torch.exp(torch.randn((n + 31) // 32, generator=gen)).repeat_interleave(32)[:n]
    x = x * scale
    if n >= 256:
        x[96:96 + 128] = 0.0  # covers whole blocks of 32, 64 and 128
        x[n // 2] = 40.0
    return x.reshape(shape)


def kbit_cases(gen, tensors, cases):
    i = 0
    for qt in ["nf4", "fp4"]:
        for bs in BLOCKSIZES:
            for dname, dt in DTYPES.items():
                for nested in [False, True]:
                    for shape in SHAPES:
                        # Keep the grid small where it would only repeat itself.
                        if bs >= 512 and shape not in ([4096 + 33], [130, 257], [7]):
                            continue
                        x = irregular(shape, gen).to(dt)
                        packed, qs = F.quantize_4bit(x, blocksize=bs, quant_type=qt, compress_statistics=nested)
                        dq = F.dequantize_4bit(packed, qs)
                        p = f"kbit{i}."
                        tensors[p + "x"] = x
                        tensors[p + "packed"] = packed
                        tensors[p + "dq"] = dq
                        tensors.update(quant_state_tensors(p, qs))
                        cases.append({"kind": "kbit", "prefix": p, "quant_type": qt, "blocksize": bs,
                                      "dtype": dname, "nested": nested, "shape": shape})
                        i += 1
    # One large weight-shaped tensor, so the parallel code paths run.
    x = irregular([1024, 1536], gen).to(torch.bfloat16)
    packed, qs = F.quantize_4bit(x, blocksize=64, quant_type="nf4", compress_statistics=True)
    p = f"kbit{i}."
    tensors.update({p + "x": x, p + "packed": packed, p + "dq": F.dequantize_4bit(packed, qs)})
    tensors.update(quant_state_tensors(p, qs))
    cases.append({"kind": "kbit", "prefix": p, "quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16",
                  "nested": True, "shape": [1024, 1536]})


def int8_cases(gen, tensors, cases):
    for i, (rows, cols, threshold) in enumerate([(1, 33, 0.0), (17, 64, 0.0), (64, 300, 0.0), (64, 300, 6.0),
                                                 (1, 300, 6.0), (200, 512, 3.0)]):
        a = (torch.randn(rows, cols, generator=gen) * 2).half()
        if rows > 3:
            a[3] = 0  # a zero row
        if threshold > 0:
            a[:, 5] *= 8  # an outlier column
        q, stats, outliers = F.int8_vectorwise_quant(a.clone(), threshold=threshold)
        p = f"int8q{i}."
        tensors[p + "a"] = a
        tensors[p + "q"] = q
        tensors[p + "stats"] = stats
        tensors[p + "dq"] = F.int8_vectorwise_dequant(q, stats)
        if outliers is not None:
            tensors[p + "outlier_cols"] = outliers.to(torch.int64)
        cases.append({"kind": "int8_quant", "prefix": p, "threshold": threshold})


def linear_cases(gen, tensors, cases):
    """Forward and input gradients of bitsandbytes' training matmuls on the CPU."""
    for i, (tokens, k, n, dname, bias) in enumerate([(5, 64, 48, "float32", True), (33, 128, 96, "float32", False),
                                                     (16, 256, 64, "bfloat16", True)]):
        dt = DTYPES[dname]
        w = torch.randn(n, k, generator=gen) * 0.05
        x = torch.randn(tokens, k, generator=gen).to(dt)
        gy = torch.randn(tokens, n, generator=gen).to(dt)
        b = (torch.randn(n, generator=gen) * 0.1).to(dt) if bias else None
        p = f"lin{i}."
        tensors.update({p + "w": w, p + "x": x, p + "gy": gy})
        if b is not None:
            tensors[p + "bias"] = b
        # 4-bit: MatMul4Bit through bnb.matmul_4bit.
        for qt in ["nf4", "fp4"]:
            packed, qs = F.quantize_4bit(w.to(dt), blocksize=64, quant_type=qt, compress_statistics=True)
            xr = x.clone().requires_grad_(True)
            y = bnb.matmul_4bit(xr, packed.t(), quant_state=qs, bias=b)
            y.backward(gy)
            tensors[p + qt + ".y"] = y.detach()
            tensors[p + qt + ".gx"] = xr.grad
        # INT8: CB/SCB like Int8Params (weights rounded to fp16 first).
        cb, scb, _ = F.int8_vectorwise_quant(w.half())
        tensors[p + "cb"] = cb
        tensors[p + "scb"] = scb
        for mode, fn, threshold in [("int8fp", MatMul8bitFp, 0.0), ("int8lt", MatMul8bitLt, 6.0)]:
            state = MatmulLtState()
            state.CB, state.SCB = cb, scb
            state.has_fp16_weights = False
            state.threshold = threshold
            state.is_training = True
            xr = x.clone().requires_grad_(True)
            if mode == "int8lt":
                xr_in = xr * 1.0
                with torch.no_grad():
                    xr_in[:, 3] *= 40  # outliers in one column
                y = fn.apply(xr_in, cb, None, b, state)
            else:
                y = fn.apply(xr, cb, None, b, state)
            y.backward(gy)
            tensors[p + mode + ".y"] = y.detach()
            tensors[p + mode + ".gx"] = xr.grad
        cases.append({"kind": "linear", "prefix": p, "dtype": dname, "bias": bias, "blocksize": 64})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1234)
    tensors, cases = {}, []
    kbit_cases(gen, tensors, cases)
    int8_cases(gen, tensors, cases)
    linear_cases(gen, tensors, cases)
    tensors = {k: v.detach().contiguous() for k, v in tensors.items()}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    meta = {"cases": json.dumps(cases), "bitsandbytes": bnb.__version__, "torch": torch.__version__}
    save_file(tensors, args.out + ".tmp", metadata=meta)
    os.replace(args.out + ".tmp", args.out)
    print(f"wrote {len(cases)} reference cases ({len(tensors)} tensors) to {args.out}")


if __name__ == "__main__":
    main()
