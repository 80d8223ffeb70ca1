#include "device/npy.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kiln::device {
namespace {

// Value of `key` in the header dict, e.g. "'descr': '<f4'" → "'<f4'" (up to the next ',' or '}'
// outside parentheses).
std::string_view DictValue(std::string_view header, std::string_view key) {
  const std::string k1 = "'" + std::string(key) + "'";
  std::size_t pos = header.find(k1);
  if (pos == std::string_view::npos) return {};
  pos = header.find(':', pos + k1.size());
  if (pos == std::string_view::npos) return {};
  ++pos;
  while (pos < header.size() && header[pos] == ' ') ++pos;
  std::size_t end = pos;
  int depth = 0;
  while (end < header.size()) {
    char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') {
      if (depth == 0) break;
      --depth;
      if (depth == 0) {
        ++end;
        break;
      }
    }
    if (depth == 0 && (c == ',' || c == '}')) break;
    ++end;
  }
  return header.substr(pos, end - pos);
}

// The header of a .npy image (magic, version, dict): where the data starts and what it holds.
struct NpyHeader {
  std::size_t data_start = 0;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  bool fortran_order = false;
  bool swap = false;
  std::size_t data_bytes = 0;  ///< what the shape and dtype need (at most kMaxTensorBytes)
};

// The byte count `bytes` must at least hold for the header to be parsed: 0 when it already does
// (or the prefix is bad, which ParseHeader then reports).
std::size_t HeaderBytesNeeded(std::string_view bytes) {
  if (bytes.size() < 12) return 12;
  const unsigned major = static_cast<unsigned char>(bytes[6]);
  std::size_t len = 0, start = 10;
  if (major == 1) {
    len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
  } else {
    for (int i = 0; i < 4; ++i) len |= static_cast<std::size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    start = 12;
  }
  return bytes.size() < start + len ? start + len : 0;
}

Result<NpyHeader> ParseHeader(std::string_view bytes) {
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) {
    return InvalidArgument("not a .npy file (bad magic)");
  }
  const unsigned major = static_cast<unsigned char>(bytes[6]);
  std::size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return DataLoss(".npy header truncated");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<std::size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    header_start = 12;
  } else {
    return InvalidArgument(".npy format version " + std::to_string(major) + " is not supported");
  }
  if (bytes.size() < header_start + header_len) return DataLoss(".npy header truncated");
  const std::string_view header = bytes.substr(header_start, header_len);
  std::string_view descr = DictValue(header, "descr");
  std::string_view fortran = DictValue(header, "fortran_order");
  std::string_view shape_s = DictValue(header, "shape");
  if (descr.empty() || fortran.empty() || shape_s.empty()) return InvalidArgument("malformed .npy header: " + std::string(header));
  const bool fortran_order = fortran.substr(0, 4) == "True";
  if (!fortran_order && fortran.substr(0, 5) != "False") {
    return InvalidArgument("malformed .npy fortran_order " + std::string(fortran));
  }
  // descr: quote, byte order ('<' little, '>' big, '|' not applicable, '=' native), kind, size.
  if (descr.size() < 5 || descr.front() != '\'' || descr.back() != '\'') {
    return InvalidArgument(".npy dtype " + std::string(descr) + " is not supported");
  }
  const char order = descr[1];
  const std::string code(descr.substr(2, descr.size() - 3));
  struct Code {
    const char* code;
    DataType type;
  };
  static constexpr Code kCodes[] = {
      {"f4", DataType::kFloat32}, {"f8", DataType::kFloat64}, {"f2", DataType::kFloat16},
      {"i1", DataType::kInt8},    {"i2", DataType::kInt16},   {"i4", DataType::kInt32},
      {"i8", DataType::kInt64},   {"u1", DataType::kUInt8},   {"u2", DataType::kUInt16},
      {"u4", DataType::kUInt32},  {"u8", DataType::kUInt64},  {"b1", DataType::kBool},
  };
  DataType dtype = DataType::kFloat32;
  bool known = false;
  for (const Code& c : kCodes) {
    if (code == c.code) {
      dtype = c.type;
      known = true;
    }
  }
  if (!known || (order != '<' && order != '>' && order != '|' && order != '=')) {
    return InvalidArgument(".npy dtype " + std::string(descr) +
                           " is not supported (float16/32/64, int8/16/32/64, uint8/16/32/64, bool; either byte "
                           "order; bfloat16 has no numpy dtype)");
  }
  const bool swap = order == '>' && DataTypeSize(dtype) > 1;
  std::vector<int64_t> shape;
  if (shape_s.front() != '(' || shape_s.back() != ')') return InvalidArgument("malformed .npy shape " + std::string(shape_s));
  std::string inner(shape_s.substr(1, shape_s.size() - 2));
  std::stringstream ss(inner);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t a = item.find_first_not_of(' ');
    if (a == std::string::npos) continue;
    try {
      std::size_t used = 0;
      long long v = std::stoll(item.substr(a), &used);
      if (v < 0) return InvalidArgument("negative .npy dimension");
      shape.push_back(v);
    } catch (const std::exception&) {
      return InvalidArgument("malformed .npy shape " + std::string(shape_s));
    }
  }
  NpyHeader h;
  h.data_bytes = DataTypeSize(dtype);
  for (int64_t d : shape) {
    if (d != 0 && h.data_bytes > kMaxTensorBytes / static_cast<std::size_t>(d)) {
      return ResourceExhausted(".npy shape holds more than the 16 GiB tensor limit");
    }
    h.data_bytes *= static_cast<std::size_t>(d);
  }
  h.data_start = header_start + header_len;
  h.dtype = dtype;
  h.shape = std::move(shape);
  h.fortran_order = fortran_order;
  h.swap = swap;
  return h;
}

}  // namespace

Result<Tensor> ParseNpy(std::string_view bytes) {
  auto hdr = ParseHeader(bytes);
  if (!hdr.ok()) return hdr.status();
  const std::vector<int64_t>& shape = hdr->shape;
  const DataType dtype = hdr->dtype;
  const bool swap = hdr->swap, fortran_order = hdr->fortran_order;
  const std::size_t data_start = hdr->data_start;
  // Truncation is checked before the tensor is allocated: a short file declaring a huge shape
  // costs nothing.
  if (bytes.size() - data_start < hdr->data_bytes) {
    return DataLoss(".npy data truncated: " + std::to_string(bytes.size() - data_start) + " bytes of " +
                    std::to_string(hdr->data_bytes));
  }
  auto t = Tensor::Zeros(shape, dtype);
  if (!t.ok()) return t.status();
  if (t->size_bytes() != 0) std::memcpy(t->raw().data(), bytes.data() + data_start, t->size_bytes());
  if (swap) {
    const std::size_t es = DataTypeSize(dtype);
    std::byte* p = t->raw().data();
    for (int64_t i = 0; i < t->num_elements(); ++i) std::reverse(p + i * es, p + (i + 1) * es);
  }
  if (dtype == DataType::kBool) {
    for (std::byte& b : t->raw()) b = b != std::byte{0} ? std::byte{1} : std::byte{0};
  }
  if (fortran_order && t->rank() > 1) {
    // Column-major on disk: element (i0, …, in) at Σ i_k · Π_{j<k} d_j. Reorder to row-major.
    const std::size_t es = DataTypeSize(dtype);
    auto c = Tensor::Zeros(shape, dtype);
    if (!c.ok()) return c.status();
    const std::byte* src = t->raw().data();
    std::byte* dst = c->raw().data();
    const std::size_t r = shape.size();
    std::vector<int64_t> idx(r, 0), fstride(r, 1);
    for (std::size_t k = 1; k < r; ++k) fstride[k] = fstride[k - 1] * shape[k - 1];
    for (int64_t i = 0; i < t->num_elements(); ++i) {
      int64_t off = 0;
      for (std::size_t k = 0; k < r; ++k) off += idx[k] * fstride[k];
      std::memcpy(dst + i * es, src + off * es, es);
      for (std::size_t k = r; k-- > 0;) {
        if (++idx[k] < shape[k]) break;
        idx[k] = 0;
      }
    }
    return c;
  }
  return t;
}

Result<Tensor> ReadNpy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open " + path);
  // The header first, then exactly the data it declares, in chunks as it arrives: the file may be
  // a pipe or a device (/dev/zero is refused by its magic after 12 bytes), and one that ends
  // early never costs the declared size.
  std::string bytes;
  auto read_to = [&](std::size_t size) {
    constexpr std::size_t kChunk = std::size_t{64} << 20;
    while (bytes.size() < size && f) {
      const std::size_t have = bytes.size();
      bytes.resize(have + std::min(kChunk, size - have));
      f.read(bytes.data() + have, static_cast<std::streamsize>(bytes.size() - have));
      bytes.resize(have + static_cast<std::size_t>(f.gcount()));
    }
  };
  read_to(12);
  if (bytes.size() >= 10 && std::memcmp(bytes.data(), "\x93NUMPY", 6) == 0) {
    constexpr std::size_t kMaxHeaderBytes = std::size_t{1} << 20;
    const std::size_t need = HeaderBytesNeeded(bytes);
    if (need > kMaxHeaderBytes) {
      return InvalidArgument(".npy header of " + std::to_string(need) + " bytes is over the 1 MiB limit").WithContext(path);
    }
    read_to(need);
  }
  auto hdr = ParseHeader(bytes);
  if (!hdr.ok()) return hdr.status().WithContext(path);
  read_to(hdr->data_start + hdr->data_bytes);
  auto t = ParseNpy(bytes);
  if (!t.ok()) return t.status().WithContext(path);
  return t;
}

Result<std::string> SerializeNpy(const Tensor& in) {
  auto nchw = in.ToLayout(Layout::kNCHW);  // a plain copy when it already is
  if (!nchw.ok()) return nchw.status();
  Tensor t = std::move(*nchw);
  if (t.dtype() == DataType::kBFloat16) {
    auto c = t.ToFloat32();
    if (!c.ok()) return c.status();
    t = std::move(*c);
  }
  const char* descr = "<f4";
  switch (t.dtype()) {
    case DataType::kFloat32: descr = "<f4"; break;
    case DataType::kFloat64: descr = "<f8"; break;
    case DataType::kFloat16: descr = "<f2"; break;
    case DataType::kInt8: descr = "|i1"; break;
    case DataType::kInt16: descr = "<i2"; break;
    case DataType::kInt32: descr = "<i4"; break;
    case DataType::kInt64: descr = "<i8"; break;
    case DataType::kUInt8: descr = "|u1"; break;
    case DataType::kUInt16: descr = "<u2"; break;
    case DataType::kUInt32: descr = "<u4"; break;
    case DataType::kUInt64: descr = "<u8"; break;
    case DataType::kBool: descr = "|b1"; break;
    case DataType::kBFloat16: break;  // converted to float32 above
  }
  std::string shape = "(";
  for (std::size_t i = 0; i < t.shape().size(); ++i) {
    shape += std::to_string(t.shape()[i]);
    if (t.shape().size() == 1 || i + 1 < t.shape().size()) shape += ",";
    if (i + 1 < t.shape().size()) shape += " ";
  }
  shape += ")";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so that magic + len + header + '\n' is a multiple of 64.
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  const auto raw = t.raw();
  out.append(reinterpret_cast<const char*>(raw.data()), raw.size());
  return out;
}

Status WriteNpy(const std::string& path, const Tensor& t) {
  auto bytes = SerializeNpy(t);
  if (!bytes.ok()) return bytes.status();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return Internal("cannot create " + tmp);
    f.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
    if (!f) return Internal("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Internal("cannot rename " + tmp + " to " + path);
  return Status::Ok();
}

}  // namespace kiln::device
