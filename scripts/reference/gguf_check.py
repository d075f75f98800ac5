"""Reads a GGUF file with the gguf package (gguf 0.19, llama.cpp's own Python reader) and checks
it against the float32 tensors it was made from, for qtrain's GGUF tests.

    python scripts/reference/gguf_check.py FILE.gguf SOURCE.safetensors OUT.json

For each tensor of FILE whose name is in SOURCE, the bytes must equal
gguf.quants.quantize(source, type) (llama.cpp's reference encodings: F16 numpy's cast, BF16
ggml_compute_fp32_to_bf16, Q8_0 quantize_row_q8_0_ref). OUT.json: {"version", "alignment",
"kv": {key: value}, "tensors": {name: {"type", "shape", "offset", "equal", "values" (F32
tensors of at most 64 values)}}}, shapes as numpy gives them (outermost first). SOURCE may be
"-" (no tensor compared).
"""

import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import quantize
from safetensors.numpy import load_file


def main():
    path, source_path, out_path = sys.argv[1:4]
    reader = GGUFReader(path)
    source = load_file(source_path) if source_path != "-" else {}
    kv = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        value = field.contents()
        if isinstance(value, float):
            value = float(np.float32(value))
        kv[key] = value
    tensors = {}
    for t in reader.tensors:
        entry = {"type": t.tensor_type.name, "shape": [int(d) for d in reversed(t.shape)],
                 "offset": int(t.data_offset)}
        if t.tensor_type.name == "F32" and t.n_elements <= 64:
            entry["values"] = [float(v) for v in np.asarray(t.data).reshape(-1)]
        if t.name in source:
            want = quantize(source[t.name].astype(np.float32), t.tensor_type).view(np.uint8).reshape(-1)
            entry["equal"] = bool(np.array_equal(np.asarray(t.data).view(np.uint8).reshape(-1), want))
        tensors[t.name] = entry
    json.dump({"version": int(reader.fields["GGUF.version"].contents()), "alignment": reader.alignment,
               "kv": kv, "tensors": tensors}, open(out_path, "w"))


if __name__ == "__main__":
    main()
