"""bitsandbytes as qtrain's parity tests use it: the same answers on every x86 CPU.

Every reference script imports bitsandbytes through this module (`from bnb_oracle import bnb, F`)
before it builds a model, so that transformers' and peft's bitsandbytes layers take the same
path too. Run as a script, it writes the cases that tests/ops/quant/bnb_oracle_test.cpp checks
the oracle itself with:

    python scripts/reference/bnb_oracle.py check --out FILE.safetensors

Note [bitsandbytes' CPU defects]
bitsandbytes 0.50.2 computes different answers on different x86 CPUs, and some are wrong:

- Its native CPU `dequantize_4bit` (libbitsandbytes_cpu, the AVX-512 build) is wrong whenever a
  row of the weight is not a whole number of blocks: NF4 [48, 96] at blocksize 64 gets 4006 of
  4608 values wrong (max error against the weight 2.04 instead of 0.39); [48, 128] at 256,
  [64, 64] at 128 and [16, 12352] at 128 too. [4096, 4096] is unaffected. Its generic path
  (`backends/default/ops.py`, `_dequantize_4bit_compute`: codebook value times block absmax in
  float32, rounded once to the output dtype) is right on every shape and CPU.
- On CPUs with AVX512-BF16, `bnb.nn.Linear4bit.forward` in eval mode with no grad repacks the
  weight for a bf16 gemv kernel (`_convert_weight_packed_for_cpu`): a different rounding, and an
  assertion `N must be divisible by block_n` on shapes whose out_features is not a multiple of 32.
- `int8_linear_matmul` runs `torch._int_mm` (exact int32) where torch reports AVX-512 and a
  float32 matmul cast to int32 elsewhere. The two agree exactly while every partial sum is an
  integer float32 holds exactly: |sum| <= K * 127^2 <= 2^24, i.e. K <= 1040.

So this module reroutes, on the CPU only: `dequantize_4bit`, `dequantize_blockwise` (the nested
absmax) and `gemv_4bit` to bitsandbytes' generic computation (with the kernels' table, where FP4
code 8 decodes to -0.0; the generic table has +0.0), `int8_linear_matmul` to the exact
integer product (what `torch._int_mm` and CUDA's igemmlt compute, for any K), and turns the
AVX512-BF16 repack off. Quantization stays bitsandbytes' own: its bytes are the format.
"""

import argparse
import os
import warnings

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # the generic kernels run eagerly

import torch
import bitsandbytes as bnb
import bitsandbytes.functional as F
import bitsandbytes.nn.modules
from bitsandbytes.backends.default import ops as generic
from bitsandbytes.backends.utils import _get_4bit_code

__all__ = ["bnb", "F", "quant_state_tensors"]


def kernel_code(quant_type):
    """The 4-bit table as bitsandbytes' CUDA and native CPU kernels decode it: the generic path's
    table, except that FP4 code 8 (the sign bit over a zero magnitude) is -0.0 there, not +0.0."""
    code = _get_4bit_code(quant_type, torch.device("cpu")).clone()
    if quant_type == "fp4":
        code[8] = -0.0
    return code


_KERNEL_CODE = {quant_type: kernel_code(quant_type) for quant_type in ["nf4", "fp4"]}


def _dequantize_4bit(A, absmax, blocksize, quant_type, shape, dtype):
    if A.dtype != torch.uint8:
        A = A.view(torch.uint8)
    return generic._dequantize_4bit_compute(A.reshape(-1), absmax, _KERNEL_CODE[quant_type], blocksize, shape, dtype)


def _dequantize_blockwise(A, absmax, code, blocksize, dtype):
    return generic._dequantize_blockwise_compute(A.reshape(-1), absmax, code, blocksize, dtype).reshape(A.shape)


def _gemv_4bit(A, B, shapeB, absmax, code, blocksize):
    quant_type = "fp4" if code[1] > 0 else "nf4"
    return torch.nn.functional.linear(A, _dequantize_4bit(B, absmax, blocksize, quant_type, shapeB, A.dtype))


def _int8_linear_matmul(A, B):
    # A: [..., K] int8, B: [N, K] int8 -> A @ B^T in int32, exactly.
    return torch.matmul(A.reshape(-1, A.shape[-1]).to(torch.int32), B.to(torch.int32).t()).reshape(
        *A.shape[:-1], B.shape[0])


_CPU = torch.library.Library("bitsandbytes", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torch warns that a registered kernel is being overridden
    for name, fn in [("dequantize_4bit", _dequantize_4bit), ("dequantize_blockwise", _dequantize_blockwise),
                     ("gemv_4bit", _gemv_4bit), ("int8_linear_matmul", _int8_linear_matmul)]:
        _CPU.impl(name, fn, "CPU", allow_override=True)
# Linear4bit reads this when it is constructed; False keeps its eval forward on the generic path.
bitsandbytes.nn.modules.has_avx512bf16 = lambda: False


def quant_state_tensors(prefix, qs):
    """A 4-bit quant state's tensors under the names the C++ tests read (`prefix` + name)."""
    if qs.nested:
        named = {"qabsmax": qs.absmax, "absmax2": qs.state2.absmax, "nested_quant_map": qs.state2.code,
                 "offset": qs.offset.reshape(1)}
    else:
        named = {"absmax": qs.absmax}
    named["quant_map"] = qs.code  # the generic table: +0.0 at FP4 code 8
    return {prefix + name: t for name, t in named.items()}


def check_cases(out):
    """Awkward shapes (rows that are not whole blocks, odd sizes), each dequantized and multiplied
    through the oracle, for the C++ test to recompute directly from codebook and absmax."""
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(4321)
    tensors = {}
    cases = [("nf4", 64, [48, 96]), ("nf4", 256, [48, 128]), ("fp4", 128, [64, 64]), ("nf4", 128, [16, 12352]),
             ("fp4", 64, [33, 70]), ("nf4", 64, [7, 9])]
    for i, (quant_type, blocksize, shape) in enumerate(cases):
        for nested in [False, True]:
            p = f"{quant_type}_{i}{'n' if nested else ''}."
            w = (torch.randn(shape, generator=gen) * 0.05).to(torch.bfloat16 if nested else torch.float32)
            packed, qs = F.quantize_4bit(w, blocksize=blocksize, quant_type=quant_type, compress_statistics=nested)
            tensors[p + "packed"] = packed
            tensors[p + "blocksize"] = torch.tensor([blocksize])
            tensors.update(quant_state_tensors(p, qs))
            tensors[p + "dq"] = F.dequantize_4bit(packed, qs)
            # The eval forward of a Linear4bit with no grad: where bitsandbytes would repack.
            layer = bnb.nn.Linear4bit(shape[1], shape[0], bias=False, compute_dtype=torch.float32,
                                      quant_type=quant_type, compress_statistics=nested)
            layer.weight = bnb.nn.Params4bit(packed, requires_grad=False, quant_state=qs, blocksize=blocksize,
                                             compress_statistics=nested, quant_type=quant_type, bnb_quantized=True)
            x = torch.randn(5, shape[1], generator=gen)
            with torch.no_grad():
                tensors[p + "x"] = x
                tensors[p + "linear"] = layer.eval()(x)
    a = torch.randint(-127, 128, (9, 1100), generator=gen, dtype=torch.int8)
    b = torch.randint(-127, 128, (13, 1100), generator=gen, dtype=torch.int8)
    # One product past float32's exact integers: 1099 * 127^2 + 2 * 127 = 17726025 (odd, > 2^24),
    # which bitsandbytes' float32 fallback cannot return.
    a[0], b[0] = 127, 127
    a[0, -1] = 2
    tensors.update({"int8.a": a, "int8.b": b, "int8.product": torch.ops.bitsandbytes.int8_linear_matmul(a, b)})
    save_file({k: v.contiguous() for k, v in tensors.items()}, out, metadata={"bitsandbytes": bnb.__version__})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["check"])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    check_cases(args.out)


if __name__ == "__main__":
    main()
