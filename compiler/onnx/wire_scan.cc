#include "compiler/onnx/wire_scan.h"

#include <vector>

namespace kiln::onnx_fe::internal {
namespace {

enum class Kind { kModel, kGraph, kNode, kAttribute };

struct Frame {
  Kind kind;
  size_t end;
  size_t depth;  // graph nesting depth of the enclosing graph
};

bool ReadVarint(std::string_view b, size_t& pos, size_t end, uint64_t& out) {
  out = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos >= end) return false;
    const auto byte = static_cast<uint8_t>(b[pos++]);
    out |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;  // more than 10 bytes
}

}  // namespace

WireScan ScanModelWire(std::string_view b, size_t max_nodes, size_t max_depth) {
  WireScan r;
  std::vector<Frame> stack;
  stack.push_back({Kind::kModel, b.size(), 0});
  size_t pos = 0;
  auto malformed = [&](const char* what) {
    r.outcome = WireScan::Outcome::kMalformed;
    r.detail = std::string(what) + " at byte offset " + std::to_string(pos);
    return r;
  };
  while (!stack.empty()) {
    Frame& top = stack.back();
    if (pos == top.end) {
      stack.pop_back();
      continue;
    }
    if (pos > top.end) return malformed("field overruns its enclosing message");
    uint64_t tag;
    if (!ReadVarint(b, pos, top.end, tag)) return malformed("truncated or invalid field tag");
    const uint64_t field = tag >> 3;
    const unsigned wire = tag & 7;
    if (field == 0) return malformed("field number 0");
    switch (wire) {
      case 0: {
        uint64_t v;
        if (!ReadVarint(b, pos, top.end, v)) return malformed("truncated varint");
        break;
      }
      case 1:
        if (top.end - pos < 8) return malformed("truncated fixed64");
        pos += 8;
        break;
      case 5:
        if (top.end - pos < 4) return malformed("truncated fixed32");
        pos += 4;
        break;
      case 2: {
        uint64_t len;
        if (!ReadVarint(b, pos, top.end, len)) return malformed("truncated length");
        if (len > top.end - pos) return malformed("length-delimited field runs past the end of the data");
        const size_t sub_end = pos + static_cast<size_t>(len);
        const Kind kind = top.kind;
        const size_t depth = top.depth;
        if (kind == Kind::kModel && field == 7) {
          stack.push_back({Kind::kGraph, sub_end, 0});
        } else if (kind == Kind::kGraph && field == 1) {
          if (++r.node_count > max_nodes) {
            r.outcome = WireScan::Outcome::kTooManyNodes;
            return r;
          }
          stack.push_back({Kind::kNode, sub_end, depth});
        } else if (kind == Kind::kNode && field == 5) {
          stack.push_back({Kind::kAttribute, sub_end, depth});
        } else if (kind == Kind::kAttribute && (field == 6 || field == 11)) {
          if (depth + 1 > r.max_depth) r.max_depth = depth + 1;
          if (depth + 1 > max_depth) {
            r.outcome = WireScan::Outcome::kTooDeep;
            return r;
          }
          stack.push_back({Kind::kGraph, sub_end, depth + 1});
        } else {
          pos = sub_end;  // skip payload (tensors, strings, ...)
        }
        break;
      }
      default:
        return malformed("invalid wire type (not an ONNX protobuf)");
    }
  }
  return r;
}

}  // namespace kiln::onnx_fe::internal
