#include "device/npy.h"

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

}  // namespace

Result<Tensor> ParseNpy(std::string_view bytes) {
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
  if (fortran.substr(0, 5) != "False") return InvalidArgument(".npy fortran_order arrays are not supported");
  DataType dtype;
  if (descr == "'<f4'") dtype = DataType::kFloat32;
  else if (descr == "'<f2'") dtype = DataType::kFloat16;
  else if (descr == "'<i4'") dtype = DataType::kInt32;
  else if (descr == "'<i8'") dtype = DataType::kInt64;
  else if (descr == "'|u1'" || descr == "'<u1'") dtype = DataType::kUInt8;
  else return InvalidArgument(".npy dtype " + std::string(descr) + " is not supported (<f4, <f2, <i4, <i8, |u1)");
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
  auto t = Tensor::Zeros(shape, dtype);
  if (!t.ok()) return t.status();
  const std::size_t data_start = header_start + header_len;
  if (bytes.size() - data_start < t->size_bytes()) {
    return DataLoss(".npy data truncated: " + std::to_string(bytes.size() - data_start) + " bytes for " +
                    t->DebugString());
  }
  if (t->size_bytes() != 0) std::memcpy(t->raw().data(), bytes.data() + data_start, t->size_bytes());
  return t;
}

Result<Tensor> ReadNpy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  auto t = ParseNpy(ss.str());
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
    case DataType::kFloat16: descr = "<f2"; break;
    case DataType::kInt32: descr = "<i4"; break;
    case DataType::kInt64: descr = "<i8"; break;
    case DataType::kUInt8: descr = "|u1"; break;
    case DataType::kBFloat16: break;
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
