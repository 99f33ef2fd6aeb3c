"""safetensors reading and writing with numpy only, plus bf16 <-> fp32 conversion.

The format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N,
N bytes of JSON mapping tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
relative to the first byte after the header) plus an optional "__metadata__" string map, then the
raw little-endian tensor bytes. The header is padded with spaces so the data starts 8-byte aligned.

bf16 is not a numpy dtype: bf16 tensors are carried as uint16 arrays of raw bits. `to_bf16_bits`
rounds float32 to the nearest bf16, ties to even (what torch's `.to(torch.bfloat16)` does), and
`bf16_bits_to_f32` widens exactly (a 16-bit left shift).
"""

import json
import os
import struct

import numpy as np

# safetensors dtype name -> (numpy dtype of the stored bits, bytes per element)
_DTYPES = {
    "BF16": (np.uint16, 2),
    "F16": (np.float16, 2),
    "F32": (np.float32, 4),
    "F64": (np.float64, 8),
    "I64": (np.int64, 8),
    "I32": (np.int32, 4),
    "I16": (np.int16, 2),
    "I8": (np.int8, 1),
    "U8": (np.uint8, 1),
    "BOOL": (np.bool_, 1),
}

# Largest header we accept; the reference implementation refuses more than 100 MB too.
_MAX_HEADER_BYTES = 100 * 1024 * 1024


class SafetensorsError(ValueError):
    """A malformed or inconsistent safetensors file; the message names the file and tensor."""


def to_bf16_bits(x):
    """float32 array -> uint16 array of bf16 bits, round-to-nearest-even; NaN stays a quiet NaN."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    # RNE: add 0x7FFF plus the lowest kept bit, then truncate. NaNs are handled separately because
    # the addition could carry a NaN payload into the exponent/sign.
    rounded = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    out = rounded.astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = ((u[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return out


def bf16_bits_to_f32(bits):
    """uint16 array of bf16 bits -> float32 array (exact)."""
    bits = np.asarray(bits, dtype=np.uint16)
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def round_to_bf16(x):
    """float32 array -> float32 array holding the nearest bf16 values (RNE)."""
    return bf16_bits_to_f32(to_bf16_bits(x))


def write_safetensors(path, tensors, metadata=None):
    """Writes `tensors`, a list of (name, safetensors dtype, numpy array of stored bits).

    For "BF16" the array must be uint16 bits (see to_bf16_bits); for other dtypes it is converted
    to that dtype. Tensors are written in the given order. metadata defaults to {"format": "pt"}.
    """
    header = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    prepared = []
    for name, dtype, array in tensors:
        if dtype not in _DTYPES:
            raise SafetensorsError(f"{path}: tensor {name}: unsupported dtype {dtype}")
        np_dtype, _ = _DTYPES[dtype]
        array = np.ascontiguousarray(array, dtype=np_dtype)
        nbytes = array.nbytes
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
        prepared.append(array)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * ((8 - (8 + len(header_bytes)) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for array in prepared:
            if array.size:
                array.tofile(f)
    os.replace(tmp, path)


def read_safetensors_header(path):
    """Returns (header dict without __metadata__, metadata dict, data start offset, file size)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise SafetensorsError(f"{path}: truncated: {size} bytes, no header length")
        (n,) = struct.unpack("<Q", raw)
        if n > _MAX_HEADER_BYTES or 8 + n > size:
            raise SafetensorsError(f"{path}: header length {n} exceeds file size {size}")
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SafetensorsError(f"{path}: corrupt JSON header: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", {}) or {}
    data_start = 8 + n
    data_len = size - data_start
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError(f"{path}: tensor {name}: malformed entry {info!r}")
        dtype, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in _DTYPES:
            raise SafetensorsError(f"{path}: tensor {name}: unsupported dtype {dtype!r}")
        if (not isinstance(shape, list) or
                not all(isinstance(d, int) and d >= 0 for d in shape)):
            raise SafetensorsError(f"{path}: tensor {name}: bad shape {shape!r}")
        if (not isinstance(offs, list) or len(offs) != 2 or
                not all(isinstance(o, int) for o in offs) or not 0 <= offs[0] <= offs[1]):
            raise SafetensorsError(f"{path}: tensor {name}: bad data_offsets {offs!r}")
        want = int(np.prod(shape, dtype=np.int64)) * _DTYPES[dtype][1]
        if offs[1] - offs[0] != want:
            raise SafetensorsError(
                f"{path}: tensor {name}: {offs[1] - offs[0]} bytes for shape {shape} {dtype}")
        if offs[1] > data_len:
            raise SafetensorsError(f"{path}: tensor {name}: data ends at {offs[1]} beyond "
                                   f"the {data_len} data bytes (truncated file?)")
    return header, metadata, data_start, size


def read_safetensors(path):
    """Returns {name: (dtype string, numpy array of stored bits)}; arrays are read-only memmaps."""
    header, _, data_start, size = read_safetensors_header(path)
    out = {}
    if size == data_start:
        mm = None
    else:
        mm = np.memmap(path, dtype=np.uint8, mode="r", offset=data_start)
    for name, info in header.items():
        np_dtype, _ = _DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        if end == begin:
            arr = np.zeros(info["shape"], dtype=np_dtype)
        else:
            arr = mm[begin:end].view(np_dtype).reshape(info["shape"])
        out[name] = (info["dtype"], arr)
    return out


def to_f32(dtype, array):
    """Stored bits of a floating-point tensor -> float32 values (exact for bf16/f16/f32)."""
    if dtype == "BF16":
        return bf16_bits_to_f32(array)
    if dtype in ("F16", "F32", "F64"):
        return np.asarray(array, dtype=np.float32)
    raise SafetensorsError(f"not a floating-point dtype: {dtype}")


def read_model_tensors(model_dir):
    """All tensors of an HF model directory ({name: (dtype, bits)}): model.safetensors, or the
    shards listed by model.safetensors.index.json (each tensor must be in the shard it names)."""
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(index_path):
        with open(index_path, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
        out = {}
        for shard in sorted(set(weight_map.values())):
            tensors = read_safetensors(os.path.join(model_dir, shard))
            for name, value in tensors.items():
                if weight_map.get(name) != shard:
                    raise SafetensorsError(f"{shard}: tensor {name} not mapped to it by the index")
                out[name] = value
        missing = sorted(set(weight_map) - set(out))
        if missing:
            raise SafetensorsError(f"{index_path}: tensors not found in their shards: {missing}")
        return out
    if os.path.exists(single):
        return read_safetensors(single)
    raise SafetensorsError(f"{model_dir}: neither model.safetensors nor "
                           "model.safetensors.index.json")
