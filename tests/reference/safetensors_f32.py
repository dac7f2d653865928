"""The one reader of F32 safetensors files for the Python test references.

numpy only (no torch), so scripts that compare checkpoints start in milliseconds.
"""
import json
import struct

import numpy as np


def read_f32_safetensors(path):
    """{name: read-only float32 array} for every tensor of `path`; any other dtype is an error."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name} is {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=np.float32).reshape(info["shape"])
    return out
