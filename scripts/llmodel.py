#!/usr/bin/env python3
"""Read and write ll model / checkpoint files (*.llm), format version 1.

The format is specified in docs/model-format.md and implemented in C by
src/ckpt/checkpoint.c; this is a small independent Python implementation for
scripts (plots, inspection, synthetic test files).  Standard library only;
numpy is used for LLModel.array() when it is installed.

    import llmodel
    m = llmodel.read("runs/x/checkpoint_best.llm")     # verifies the checksum
    m.config                  # config text (str)
    m.tensors["dec.dlcl_weights"].shape
    m.values("dec.dlcl_weights")       # flat list of floats
    m.array("dec.dlcl_weights")        # numpy array of the right shape

    llmodel.write("x.llm", config_text, vocab_bytes,
                  [("w", "f32", [2, 3], [1, 2, 3, 4, 5, 6])])

Command line: `python3 scripts/llmodel.py FILE.llm` prints the header and
the tensor index (a quick `llinfo`).
"""

import array
import os
import struct
import sys

from corpusio import write_atomic  # noqa: E402  (scripts/ is on sys.path)

MAGIC = b"LLMODEL\0"
END_MAGIC = b"LLMEND\0\0"
VERSION = 1
ALIGN = 64
FNV_INIT = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK64 = (1 << 64) - 1
MAX_NAME = 1024
MAX_NDIM = 4

# dtype code -> (name, bytes per element)
DTYPES = {0: ("f32", 4), 1: ("f64", 8), 2: ("i32", 4), 3: ("i64", 8),
          4: ("u8", 1), 5: ("bf16", 2)}
DTYPE_CODE = {name: code for code, (name, _) in DTYPES.items()}
# struct format characters (little-endian), for values()
_FMT = {"f32": "f", "f64": "d", "i32": "i", "i64": "q", "u8": "B"}


class LLModelError(Exception):
    """A file that is not a valid ll model file; str() is one line that
    begins with the path, like the C reader's messages."""


def fnv1a64(data, h=FNV_INIT):
    """ll_fnv1a64: FNV-1a 64 over whole 8-byte little-endian words, then the
    remaining bytes one at a time (a word-wise variant, not the textbook
    byte-wise FNV-1a)."""
    mv = memoryview(data)
    n = len(mv) - len(mv) % 8
    p, m = FNV_PRIME, MASK64
    for (w,) in struct.iter_unpack("<Q", mv[:n]):
        h = ((h ^ w) * p) & m
    for b in bytes(mv[n:]):
        h = ((h ^ b) * p) & m
    return h


class Tensor:
    __slots__ = ("name", "dtype", "shape", "offset", "nbytes")

    def __init__(self, name, dtype, shape, offset, nbytes):
        self.name, self.dtype, self.shape = name, dtype, tuple(shape)
        self.offset, self.nbytes = offset, nbytes

    @property
    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __repr__(self):
        return "Tensor(%s, %s, %s)" % (self.name, self.dtype,
                                       list(self.shape))


class LLModel:
    """A parsed model file.  tensors: dict name -> Tensor, in file order."""

    def __init__(self, path, data, version, flags, config, vocab, tensors):
        self.path, self._data = path, data
        self.version, self.flags = version, flags
        self.config, self.vocab, self.tensors = config, vocab, tensors

    def raw(self, name):
        t = self.tensors[name]
        return bytes(self._data[t.offset:t.offset + t.nbytes])

    def values(self, name):
        """The tensor's elements as a flat Python list (row-major)."""
        t = self.tensors[name]
        b = self.raw(name)
        if t.dtype == "bf16":
            hi = array.array("H")
            hi.frombytes(b)
            if sys.byteorder == "big":
                hi.byteswap()
            return [struct.unpack("<f", struct.pack("<I", h << 16))[0]
                    for h in hi]
        return list(struct.unpack("<%d%s" % (t.numel, _FMT[t.dtype]), b))

    def array(self, name):
        """The tensor as a numpy array of its shape (needs numpy)."""
        import numpy as np
        t = self.tensors[name]
        if t.dtype == "bf16":
            u = np.frombuffer(self.raw(name), dtype="<u2").astype("<u4")
            return (u << 16).view("<f4").reshape(t.shape)
        dt = {"f32": "<f4", "f64": "<f8", "i32": "<i4", "i64": "<i8",
              "u8": "u1"}[t.dtype]
        return np.frombuffer(self.raw(name), dtype=dt).reshape(t.shape)


def _u32(b, off):
    return struct.unpack_from("<I", b, off)[0]


def _u64(b, off):
    return struct.unpack_from("<Q", b, off)[0]


def read(path, verify=True):
    """Read and check a model file; raise LLModelError (one line, starting
    with the path) if it is not valid.  verify=False skips the checksum
    (every length and offset is still checked)."""
    def bad(msg):
        raise LLModelError("%s: %s" % (path, msg))

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        bad(e.strerror or str(e))
    size = len(data)
    if size == 0:
        bad("empty file")
    if size < 8 or data[:8] != MAGIC:
        bad("not an ll model file (bad magic)")
    if size < 32:
        bad("truncated: header incomplete")
    version, flags = _u32(data, 8), _u32(data, 12)
    if version > VERSION:
        bad("model format version %d is newer than this ll (%d)"
            % (version, VERSION))
    if version != VERSION:
        bad("unsupported model format version %d" % version)
    if flags != 0:
        bad("unsupported flags 0x%x" % flags)
    declared = _u64(data, 16)
    if declared > size:
        bad("truncated: %d of %d bytes" % (size, declared))
    if declared < size:
        bad("unexpected bytes after the end (%d, header says %d)"
            % (size, declared))
    if size < 32 + 8 + 8 + 16:
        bad("truncated: file too small")
    if data[size - 8:] != END_MAGIC:
        bad("corrupt: end magic missing")
    if verify and fnv1a64(memoryview(data)[:size - 16]) != _u64(data,
                                                                size - 16):
        bad("checksum mismatch: file is corrupt or truncated")
    end = size - 16
    pos = 24

    def take(n, what):
        nonlocal pos
        if n > end - pos:
            bad("corrupt: %s out of bounds" % what)
        pos += n
        return pos - n

    clen = _u64(data, take(8, "config length"))
    c0 = take(clen, "config text")
    try:
        config = data[c0:c0 + clen].decode("utf-8")
    except UnicodeDecodeError:
        bad("corrupt: config text is not UTF-8")
    if "\0" in config:
        bad("corrupt: NUL byte in config text")
    vlen = _u64(data, take(8, "vocabulary length"))
    v0 = take(vlen, "vocabulary")
    vocab = data[v0:v0 + vlen]
    n = _u64(data, take(8, "tensor count"))
    if n > (end - pos) // 24:
        bad("corrupt: tensor index runs past the end of the file")
    tensors = {}
    for i in range(n):
        ln = _u32(data, take(4, "tensor %d name length" % i))
        if not 1 <= ln <= MAX_NAME:
            bad("corrupt: tensor %d: name length %d" % (i, ln))
        n0 = take(ln, "tensor %d name" % i)
        try:
            name = data[n0:n0 + ln].decode("utf-8")
        except UnicodeDecodeError:
            bad("corrupt: tensor %d: name is not UTF-8" % i)
        code = _u32(data, take(4, "tensor %d dtype" % i))
        if code not in DTYPES:
            bad("corrupt: tensor %s: unknown dtype %d" % (name, code))
        ndim = _u32(data, take(4, "tensor %d ndim" % i))
        if ndim > MAX_NDIM:
            bad("corrupt: tensor %s: ndim %d" % (name, ndim))
        shape = []
        for _ in range(ndim):
            d = struct.unpack_from("<q", data, take(8, "tensor shape"))[0]
            if d < 0:
                bad("corrupt: tensor %s: negative dimension" % name)
            shape.append(d)
        off = _u64(data, take(8, "tensor offset"))
        nbytes = _u64(data, take(8, "tensor size"))
        dname, esize = DTYPES[code]
        numel = 1
        for d in shape:
            numel *= d
        if nbytes != numel * esize:
            bad("corrupt: tensor %s: %d bytes for shape %s %s"
                % (name, nbytes, shape, dname))
        if name in tensors:
            bad("corrupt: duplicate tensor name '%s'" % name)
        tensors[name] = Tensor(name, dname, shape, off, nbytes)
    prev_end = pos
    for t in tensors.values():
        if t.offset % ALIGN or t.offset < prev_end or \
                t.nbytes > end - t.offset:
            bad("corrupt: tensor %s: data at offset %d (%d bytes) is "
                "misaligned or out of bounds" % (t.name, t.offset, t.nbytes))
        prev_end = t.offset + t.nbytes
    return LLModel(path, data, version, flags, config, vocab, tensors)


def _align(x):
    return (x + ALIGN - 1) // ALIGN * ALIGN


def _tensor_bytes(name, dtype, shape, values):
    if dtype not in DTYPE_CODE:
        raise ValueError("tensor %s: unknown dtype %r" % (name, dtype))
    numel = 1
    for d in shape:
        if d < 0:
            raise ValueError("tensor %s: negative dimension" % name)
        numel *= d
    if isinstance(values, (bytes, bytearray, memoryview)):
        b = bytes(values)
    else:
        if hasattr(values, "ravel"):          # numpy
            values = values.ravel().tolist()
        values = list(values)
        if len(values) != numel:
            raise ValueError("tensor %s: %d values for shape %s"
                             % (name, len(values), list(shape)))
        if dtype == "bf16":
            b = b"".join(struct.pack("<H", struct.unpack(
                "<I", struct.pack("<f", v))[0] >> 16) for v in values)
        else:
            b = struct.pack("<%d%s" % (numel, _FMT[dtype]), *values)
    if len(b) != numel * DTYPES[DTYPE_CODE[dtype]][1]:
        raise ValueError("tensor %s: %d bytes for shape %s %s"
                         % (name, len(b), list(shape), dtype))
    return b


def write(path, config, vocab, tensors):
    """Write a model file the way ll_ckpt_write does: validate everything
    first, then a temporary file in the same directory, fsync, rename.

    tensors: iterable of (name, dtype, shape, values), dtype one of f32 f64
    i32 i64 u8 bf16, values a flat sequence, a numpy array, or raw
    little-endian bytes."""
    cfg = config.encode("utf-8") if isinstance(config, str) else bytes(config)
    if b"\0" in cfg:
        raise ValueError("config text contains a NUL byte")
    vocab = bytes(vocab or b"")
    items, seen = [], set()
    for name, dtype, shape, values in tensors:
        nb = name.encode("utf-8")
        if not 1 <= len(nb) <= MAX_NAME:
            raise ValueError("tensor name %r: length must be 1..%d"
                             % (name, MAX_NAME))
        if name in seen:
            raise ValueError("duplicate tensor name %r" % name)
        seen.add(name)
        shape = [int(d) for d in shape]
        if len(shape) > MAX_NDIM:
            raise ValueError("tensor %s: ndim %d > %d"
                             % (name, len(shape), MAX_NDIM))
        items.append((nb, dtype, shape, _tensor_bytes(name, dtype, shape,
                                                      values)))
    meta = bytearray()
    meta += MAGIC + struct.pack("<II", VERSION, 0) + b"\0" * 8   # size later
    meta += struct.pack("<Q", len(cfg)) + cfg
    meta += struct.pack("<Q", len(vocab)) + vocab
    meta += struct.pack("<Q", len(items))
    index_len = sum(4 + len(nb) + 8 + 8 * len(sh) + 16
                    for nb, _, sh, _ in items)
    cur = _align(len(meta) + index_len)
    offsets = []
    for nb, dtype, shape, b in items:
        cur = _align(cur)
        offsets.append(cur)
        cur += len(b)
    body_end = cur          # trailer right after the last tensor's data
    size = body_end + 16
    for (nb, dtype, shape, b), off in zip(items, offsets):
        meta += struct.pack("<I", len(nb)) + nb
        meta += struct.pack("<II", DTYPE_CODE[dtype], len(shape))
        meta += b"".join(struct.pack("<q", d) for d in shape)
        meta += struct.pack("<QQ", off, len(b))
    struct.pack_into("<Q", meta, 16, size)
    out = bytearray(meta)
    for (nb, dtype, shape, b), off in zip(items, offsets):
        out += b"\0" * (off - len(out))
        out += b
    out += b"\0" * (body_end - len(out))
    out += struct.pack("<Q", fnv1a64(out)) + END_MAGIC
    assert len(out) == size

    write_atomic(path, out)


def main(argv):
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print("usage: llmodel.py FILE.llm   (print the header and tensor "
              "index)", file=sys.stderr)
        return 2
    try:
        m = read(argv[0])
    except LLModelError as e:
        print("llmodel: error: %s" % e, file=sys.stderr)
        return 1
    total = sum(t.nbytes for t in m.tensors.values())
    print("%s: ll model format %d, %d bytes, checksum ok" %
          (m.path, m.version, len(m._data)))
    print("config: %d bytes, vocabulary: %d bytes, tensors: %d (%d bytes)"
          % (len(m.config), len(m.vocab), len(m.tensors), total))
    for t in m.tensors.values():
        print("  %-48s %-4s %s" % (t.name, t.dtype, list(t.shape)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
