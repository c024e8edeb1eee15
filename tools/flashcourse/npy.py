"""flashcourse.npy — .npy files with the struct module (no NumPy), as the stages' --load and --save
read and write them: float32 ('<f4') and float16 ('<f2') [B, H, N, D] in C order, version 1.0."""
import ast
import ctypes
import os
import struct

SIZES = {"<f2": 2, "<f4": 4, "<f8": 8}
CODES = {"<f2": "e", "<f4": "f", "<f8": "d"}


def npy_descr(dtype_name):
    """The .npy element type in which a stage's --load gets a tensor of this dtype: bfloat16 goes as
    float32 holding the bf16 values exactly (the course's reader takes float32 and float16 only)."""
    return {"float16": "<f2", "bfloat16": "<f4", "float32": "<f4"}[dtype_name]


def npy_header(descr, shape):
    """The preamble and header of a version 1.0 .npy file, as np.save writes them."""
    dims = ", ".join(str(int(n)) for n in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"  # data on a 64-byte boundary
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1")


def element_count(shape):
    count = 1
    for n in shape:
        count *= int(n)
    return count


def write_npy(path, descr, shape, data):
    """Writes raw little-endian C-order data (bytes-like) as a .npy file."""
    if len(data) != element_count(shape) * SIZES[descr]:
        raise ValueError("%s: %d bytes of data for shape %s of %s" % (path, len(data), tuple(shape), descr))
    with open(path, "wb") as f:
        f.write(npy_header(descr, shape))
        f.write(data)


def write_npy_values(path, shape, values, descr="<f4"):
    """Writes a flat list of Python floats as a .npy file (rounded to the element type)."""
    write_npy(path, descr, shape, struct.pack("<%d%s" % (len(values), CODES[descr]), *values))


def read_npy(path):
    """(descr, shape, raw data bytes) of a C-order .npy file, any format version (ValueError if not)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY" or len(data) < 10:
        raise ValueError("%s: not a .npy file" % path)
    if data[6] == 1:
        (hlen,), start = struct.unpack("<H", data[8:10]), 10
    else:
        (hlen,), start = struct.unpack("<I", data[8:12]), 12
    header = ast.literal_eval(data[start:start + hlen].decode("latin1"))
    if header.get("fortran_order"):
        raise ValueError("%s: Fortran order" % path)
    shape = tuple(header["shape"])
    body = data[start + hlen:]
    size = SIZES.get(header["descr"])
    if size is None:
        raise ValueError("%s: element type %r (expected <f2, <f4 or <f8)" % (path, header["descr"]))
    if len(body) != size * element_count(shape):
        raise ValueError("%s: %d data bytes for shape %s of %s" % (path, len(body), shape, header["descr"]))
    return header["descr"], shape, body


def read_npy_values(path):
    """(descr, shape, a flat list of Python floats) of a .npy file."""
    descr, shape, body = read_npy(path)
    return descr, shape, list(struct.unpack("<%d%s" % (element_count(shape), CODES[descr]), body))


def round_trip(values, descr):
    """The values as a file of this element type stores them, read back as Python floats."""
    code = CODES[descr]
    return list(struct.unpack("<%d%s" % (len(values), code), struct.pack("<%d%s" % (len(values), code), *values)))


def to_bfloat16(x):
    """x rounded to the nearest bfloat16 (ties to even), as a Python float."""
    (bits,) = struct.unpack("<I", struct.pack("<f", x))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


# ---- PyTorch tensors to and from the stages' files (torch passed in: the package never imports it) ----

def tensor_bytes(t):
    """The raw bytes of a tensor (copied to the host, contiguous), without NumPy."""
    t = t.detach().contiguous().cpu()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def save_inputs(torch, folder, inputs, dtype_name):
    """Q, K, V (and dO, where not None) as q.npy, k.npy, v.npy (do.npy) in the stages' format."""
    descr = npy_descr(dtype_name)
    for name, t in zip(("q", "k", "v", "do"), inputs):
        if t is None:  # no dO: a forward case
            continue
        # bfloat16 -> float32 is exact: the file holds the bf16 values, which the stage's
        # --dtype bfloat16 rounds back to themselves.
        t = t.float() if descr == "<f4" else t.half()
        write_npy(os.path.join(folder, name + ".npy"), descr, tuple(t.shape), tensor_bytes(t))


def load_output(torch, path, shape):
    """A stage's --save output (o.npy, lse.npy, dq.npy, ...) as a CPU tensor of the expected shape."""
    descr, file_shape, body = read_npy(path)
    if tuple(file_shape) != tuple(shape):
        raise ValueError("%s has shape %s, expected %s" % (os.path.basename(path), tuple(file_shape), tuple(shape)))
    dtype = {"<f2": torch.float16, "<f4": torch.float32, "<f8": torch.float64}[descr]
    return torch.frombuffer(bytearray(body), dtype=dtype).reshape(shape)
