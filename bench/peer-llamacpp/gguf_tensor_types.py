"""Prints "name type_id" for each tensor of a GGUF v3 file (kquant_exactness compares the
per-tensor types of Koi's and llama.cpp's K-quant mixes with it)."""
import struct
import sys


def read_tensor_types(path):
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    def take_string():
        nonlocal pos
        (length,) = take("Q")
        s = data[pos:pos + length].decode("utf-8")
        pos += length
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}

    def skip_value(vtype):
        if vtype == 8:
            take_string()
        elif vtype == 9:
            elem, count = take("IQ")
            for _ in range(count):
                skip_value(elem)
        else:
            take(scalar[vtype])

    magic, _version, n_tensors, n_kv = take("4sIQQ")
    assert magic == b"GGUF", path
    for _ in range(n_kv):
        take_string()
        (vtype,) = take("I")
        skip_value(vtype)
    out = []
    for _ in range(n_tensors):
        name = take_string()
        (n_dims,) = take("I")
        take("Q" * n_dims)
        ggml_type, _offset = take("IQ")
        out.append((name, ggml_type))
    return out


if __name__ == "__main__":
    for name, ggml_type in sorted(read_tensor_types(sys.argv[1])):
        print(name, ggml_type)
