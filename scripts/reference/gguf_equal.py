"""Whether two GGUF files hold the same keys and the same tensors, whatever their order, read with
the gguf package (llama.cpp's own Python reader), for qtrain's GGUF tests.

    python scripts/reference/gguf_equal.py A.gguf B.gguf

Prints "equal" and exits 0, or prints each key and tensor that differs (missing, another value,
another type, shape or bytes) and exits 1.
"""

import sys

import numpy as np
from gguf import GGUFReader


def main():
    a, b = GGUFReader(sys.argv[1]), GGUFReader(sys.argv[2])
    problems = []
    keys_a = {k: f.contents() for k, f in a.fields.items() if not k.startswith("GGUF.")}
    keys_b = {k: f.contents() for k, f in b.fields.items() if not k.startswith("GGUF.")}
    for k in sorted(set(keys_a) | set(keys_b)):
        if keys_a.get(k) != keys_b.get(k):
            problems.append(f"key {k}: {str(keys_a.get(k))[:80]} against {str(keys_b.get(k))[:80]}")
    tensors_a, tensors_b = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
    for name in sorted(set(tensors_a) | set(tensors_b)):
        ta, tb = tensors_a.get(name), tensors_b.get(name)
        if ta is None or tb is None:
            problems.append(f"tensor {name}: only in {'B' if ta is None else 'A'}")
        elif (ta.tensor_type != tb.tensor_type or list(ta.shape) != list(tb.shape)
              or not np.array_equal(np.asarray(ta.data).view(np.uint8), np.asarray(tb.data).view(np.uint8))):
            problems.append(f"tensor {name}: another type, shape or bytes")
    print("\n".join(problems) if problems else "equal")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
