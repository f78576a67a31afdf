"""The part of the `gguf` package's writer the peer's converter calls, on numpy alone.

qwentts_side_by_side.sh puts this file on the converter's PYTHONPATH as `gguf`, so that the
conversion needs no pip. Written from the GGUF v3 format description (ggml's docs/gguf.md):
a header (magic, version, tensor count, key-value count), the key-value pairs, the tensor infos
(name, dimensions innermost first, ggml type, offset in the data section), then the tensor data,
each tensor starting on a multiple of the alignment (32 bytes, the default: no general.alignment).

Value types follow the gguf package's choices, which the peer's loader relies on: add_uint32 is
UINT32, a Python int inside an array is INT32 (read back as raw 32-bit words), a float FLOAT32.
"""

import struct

import numpy as np

ALIGNMENT = 32
_UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY = 4, 5, 6, 7, 8, 9
_TENSOR_TYPES = {  # numpy dtype -> ggml type
    np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(np.int8): 24, np.dtype(np.int16): 25,
    np.dtype(np.int32): 26, np.dtype(np.int64): 27, np.dtype(np.float64): 28,
}


def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _type_of(v):
    # bool before int: a Python bool is an int too.
    if isinstance(v, str):
        return _STRING
    if isinstance(v, bool):
        return _BOOL
    if isinstance(v, int):
        return _INT32
    if isinstance(v, float):
        return _FLOAT32
    raise ValueError(f"no GGUF type for {type(v).__name__}")


def _value(t, v):
    if t == _UINT32:
        return struct.pack("<I", v)
    if t == _INT32:
        return struct.pack("<i", v)
    if t == _FLOAT32:
        return struct.pack("<f", v)
    if t == _BOOL:
        return struct.pack("<B", 1 if v else 0)
    if t == _STRING:
        return _string(v)
    raise ValueError(f"GGUF value type {t} is not written here")


def _pad(n):
    return (ALIGNMENT - n % ALIGNMENT) % ALIGNMENT


class GGUFWriter:
    def __init__(self, path, arch):
        self._path = str(path)
        self._kv = []       # (key, encoded type and value)
        self._tensors = []  # (name, array)
        self._file = None
        self.add_string("general.architecture", arch)

    def _add(self, key, t, payload):
        if any(k == key for k, _ in self._kv):
            raise ValueError(f"duplicate key {key}")
        self._kv.append((key, struct.pack("<I", t) + payload))

    def add_uint32(self, key, v):
        self._add(key, _UINT32, _value(_UINT32, int(v)))

    def add_float32(self, key, v):
        self._add(key, _FLOAT32, _value(_FLOAT32, float(v)))

    def add_bool(self, key, v):
        self._add(key, _BOOL, _value(_BOOL, bool(v)))

    def add_string(self, key, v):
        self._add(key, _STRING, _string(v))

    def add_array(self, key, values):
        values = list(values)
        t = _type_of(values[0]) if values else _INT32
        if any(_type_of(v) != t for v in values):
            raise ValueError(f"{key}: an array of mixed types")
        body = b"".join(_value(t, v) for v in values)
        self._add(key, _ARRAY, struct.pack("<IQ", t, len(values)) + body)

    def add_tensor(self, name, arr):
        arr = np.ascontiguousarray(arr)
        if arr.dtype.newbyteorder("=") not in _TENSOR_TYPES:
            raise ValueError(f"tensor {name}: dtype {arr.dtype} is not written here")
        if arr.ndim > 4:
            raise ValueError(f"tensor {name}: {arr.ndim} dimensions (GGUF holds at most 4)")
        if any(n == name for n, _ in self._tensors):
            raise ValueError(f"duplicate tensor {name}")
        self._tensors.append((name, arr.astype(arr.dtype.newbyteorder("<"), copy=False)))

    def write_header_to_file(self):
        self._file = open(self._path, "wb")
        self._file.write(b"GGUF" + struct.pack("<IQQ", 3, len(self._tensors), len(self._kv)))

    def write_kv_data_to_file(self):
        for key, payload in self._kv:
            self._file.write(_string(key) + payload)

    def write_tensors_to_file(self):
        f = self._file
        offset = 0
        for name, arr in self._tensors:
            dims = arr.shape[::-1] if arr.ndim else (1,)
            f.write(_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims))
            f.write(struct.pack("<IQ", _TENSOR_TYPES[arr.dtype.newbyteorder("=")], offset))
            offset += arr.nbytes + _pad(arr.nbytes)
        f.write(b"\0" * _pad(f.tell()))
        for i, (_, arr) in enumerate(self._tensors):
            f.write(arr.reshape(-1).view(np.uint8))
            f.write(b"\0" * _pad(arr.nbytes))
            self._tensors[i] = (None, None)  # the array can go once it is on disk

    def close(self):
        if self._file:
            self._file.close()
            self._file = None
