"""The part of the `safetensors` package the peer's converter calls, on numpy alone.

qwentts_side_by_side.sh puts this file on the converter's PYTHONPATH as `safetensors`, so that the
conversion needs no pip (Debian's python3-numpy is enough). The converter opens a file with
safe_open(path, framework="pt") and reads each tensor as a torch tensor (`t.float().numpy()`,
`t.numpy()`, `t.shape`); get_tensor returns a numpy array that answers those calls.

The format: an 8-byte little-endian header length, that many bytes of JSON naming each tensor's
dtype, shape and [begin, end) byte range in the data that follows.
"""

import json
import struct

import numpy as np

_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U64": np.uint64, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8,
    "BOOL": np.bool_,
}


class Tensor(np.ndarray):
    """A numpy array with the torch methods the converter uses."""

    def float(self):
        return np.asarray(self, dtype=np.float32).view(Tensor)

    def numpy(self):
        return np.asarray(self)


class _File:
    def __init__(self, path):
        self._map = np.memmap(path, dtype=np.uint8, mode="r")
        if self._map.size < 8:
            raise ValueError(f"{path}: too short for a safetensors file")
        (n,) = struct.unpack("<Q", self._map[:8].tobytes())
        if 8 + n > self._map.size:
            raise ValueError(f"{path}: the header runs past the end of the file")
        header = json.loads(self._map[8:8 + n].tobytes())
        self._meta = header.pop("__metadata__", {}) or {}
        self._entries = header
        self._data = 8 + n

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._map = None
        return False

    def keys(self):
        return list(self._entries.keys())

    def metadata(self):
        return dict(self._meta)

    def get_tensor(self, name):
        e = self._entries[name]
        begin, end = e["data_offsets"]
        raw = self._map[self._data + begin:self._data + end]
        shape = tuple(e["shape"])
        dtype = e["dtype"]
        if dtype == "BF16":
            # bf16 is the top half of an f32: widen the bits (numpy has no bf16 type).
            arr = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        elif dtype in _DTYPES:
            arr = raw.view(np.dtype(_DTYPES[dtype]).newbyteorder("<")).astype(_DTYPES[dtype])
        else:
            raise ValueError(f"tensor {name}: dtype {dtype} is not supported here")
        return arr.reshape(shape).view(Tensor)


def safe_open(path, framework="pt", device="cpu"):  # noqa: ARG001 (the converter passes framework)
    return _File(str(path))
