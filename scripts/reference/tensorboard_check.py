"""Reads a log directory's event files with TensorBoard's own reader (EventAccumulator) and checks
its scalars against expectations, so that qtrain's hand-encoded event files are judged by the
program that will read them, not by qtrain itself.

    python scripts/reference/tensorboard_check.py LOG_DIR EXPECTATIONS.json

EXPECTATIONS.json maps each scalar tag to its [step, value] pairs in the order written, e.g.
{"train/loss": [[1, 2.5], [2, 2.25]], "eval/loss": [[2, 2.4]]}. The directory must hold exactly
these tags; values are compared at float precision (TensorBoard's simple_value is a float).
Exits 0 and prints "ok" on a match, otherwise exits 1 with what differs.
"""

import json
import math
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def as_float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def same(a, b):
    a, b = as_float32(a), as_float32(b)
    return a == b or (math.isnan(a) and math.isnan(b))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    log_dir, expectations_file = sys.argv[1], sys.argv[2]
    with open(expectations_file) as f:
        expected = json.load(f)

    # size_guidance 0: keep every event rather than a reservoir sample.
    accumulator = EventAccumulator(log_dir, size_guidance={"scalars": 0})
    accumulator.Reload()
    tags = sorted(accumulator.Tags()["scalars"])

    problems = []
    if tags != sorted(expected):
        problems.append(f"scalar tags in {log_dir}: {tags}; expected {sorted(expected)}")
    for tag in sorted(expected):
        if tag not in tags:
            continue
        got = [(e.step, e.value) for e in accumulator.Scalars(tag)]
        want = [(int(step), float(value)) for step, value in expected[tag]]
        if len(got) != len(want) or any(gs != ws or not same(gv, wv) for (gs, gv), (ws, wv) in zip(got, want)):
            problems.append(f"{tag}: TensorBoard read {got}; expected {want}")

    if problems:
        sys.exit("tensorboard_check: mismatch\n" + "\n".join(problems))
    print("ok")


if __name__ == "__main__":
    main()
