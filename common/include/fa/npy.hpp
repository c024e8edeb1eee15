// npy.hpp — read and write NumPy .npy files: float32 and float16, C order.
//
// This is how a learner compares any stage with NumPy or PyTorch: --save writes o.npy and lse.npy,
// --load reads q.npy, k.npy, v.npy.
//
// The reader follows numpy/lib/format.py, so that a file is accepted here exactly when np.load
// would accept it and it holds float32 or float16 data in C order:
//   accepted  format versions 1.0, 2.0 and 3.0; any header that Python's ast.literal_eval reads as
//             a dict with exactly the keys 'descr', 'fortran_order', 'shape' (quotes of either
//             kind, escapes, whitespace, newlines, comments, trailing commas, keys in any order);
//             descr '<f4' '=f4' '|f4' '<f2' '=f2' '|f2' and big-endian '>f4' '>f2' (byte-swapped).
//   refused   (UsageError, one line: "NAME: not a usable .npy file: WHY") other versions, headers
//             over 10000 bytes (NumPy >= 1.24 refuses them by default), anything that is not such
//             a literal dict, shapes that are not tuples of non-negative ints, more than 2^40
//             elements, fortran_order True, other dtypes, and a file whose size does not match
//             its shape (NumPy ignores bytes past the data; we refuse them, as they mean the file
//             is not what its header says).
// A 0-d array (shape ()) has one element and a shape with a 0 dimension has none: both are valid
// .npy files, and callers that need a particular rank check it themselves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fa/dtype.hpp"
#include "fa/tensor.hpp"

namespace fa {

// The header dict, checked.
struct NpyHeader {
  DType dtype = DType::float32;  // from 'descr': float32 or float16
  bool big_endian = false;       // descr '>f4' or '>f2': the reader byte-swaps the data
  std::vector<std::int64_t> shape;
};

// Parses and checks the text of the header dict (what follows the length field). `name` starts
// every error message. Throws UsageError.
NpyHeader parse_npy_header(std::string_view dict_text, const std::string& name);

struct NpyArray {
  std::vector<std::int64_t> shape;
  DType dtype = DType::float32;  // float32 or float16, as in the file
  std::vector<std::byte> data;   // the elements' bytes, little-endian (swapped if the file was big-endian), C order
  std::int64_t numel() const;    // the product of the shape: 1 for shape ()
};

// A whole .npy file held in memory. Throws UsageError.
NpyArray read_npy_bytes(std::string_view bytes, const std::string& name);
// Reads a .npy file. The header and the file size are checked before any data is read, so a huge
// file with a bad header fails at once. Throws UsageError.
NpyArray read_npy(const std::string& path);
// Writes float32 data, format 1.0, as np.save does.
void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const float* values);

// A [B, H, N, D] tensor from a 4-d .npy file (throws UsageError for any other rank).
HostTensor read_npy_tensor(const std::string& path);
void write_npy_tensor(const std::string& path, const HostTensor& t);
// LSE is written as [B, H, Nq].
void write_npy_lse(const std::string& path, const HostTensor& lse);

}  // namespace fa
