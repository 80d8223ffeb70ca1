#include "runtime/host_kernels/movement.h"

#include <algorithm>
#include <cstring>

namespace kiln::runtime::host_kernels {

namespace {

// A contiguous piece of the innermost dim's table: `len` outputs from source offset `src`
// onwards (src + 0, 1, ...), or fill values when src == kFill.
struct Segment {
  int64_t out = 0;
  int64_t len = 0;
  int64_t src = 0;
};

std::vector<Segment> Segments(const std::vector<int64_t>& table) {
  std::vector<Segment> segs;
  for (int64_t o = 0; o < static_cast<int64_t>(table.size()); ++o) {
    const int64_t t = table[o];
    if (!segs.empty()) {
      Segment& s = segs.back();
      const bool extends = s.src == kFill ? t == kFill : (t != kFill && t == s.src + s.len);
      if (extends) {
        ++s.len;
        continue;
      }
    }
    segs.push_back({o, 1, t});
  }
  return segs;
}

template <size_t ES>
void FillRow(std::byte* dst, int64_t n, const std::byte* fill) {
  for (int64_t o = 0; o < n; ++o) std::memcpy(dst + o * ES, fill, ES);
}

// The copy for elements of ES bytes over the simplified dims (rank >= 1).
template <size_t ES>
Status Copy(const std::byte* src, std::byte* dst, int64_t base, const Shape& dims, const std::vector<DimMap>& maps,
            const std::byte* fill, CancelPoll& poll) {
  const size_t r = dims.size();
  const int64_t n = dims[r - 1];
  const DimMap& inner = maps[r - 1];

  // Blocked 2-D transpose: the last output dim walks the source with a stride, the one before it
  // contiguously (NCHW <-> NHWC and every Transpose that moves the innermost axis).
  const bool strided = std::all_of(maps.begin(), maps.end(), [](const DimMap& m) { return m.table.empty(); });
  if (r >= 2 && strided && inner.stride != 1 && maps[r - 2].stride == 1) {
    constexpr int64_t kBlock = ES <= 2 ? 32 : 16;
    const int64_t m = dims[r - 2];
    const int64_t sb = inner.stride;
    Shape outer(dims.begin(), dims.end() - 2);
    int64_t planes = 1;
    for (int64_t d : outer) planes *= d;
    std::vector<int64_t> idx(outer.size(), 0);
    for (int64_t p = 0; p < planes; ++p) {
      int64_t off = base;
      for (size_t d = 0; d < outer.size(); ++d) off += idx[d] * maps[d].stride;
      std::byte* plane = dst + p * m * n * static_cast<int64_t>(ES);
      for (int64_t a0 = 0; a0 < m; a0 += kBlock) {
        const int64_t a1 = std::min(m, a0 + kBlock);
        for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
          const int64_t b1 = std::min(n, b0 + kBlock);
          for (int64_t b = b0; b < b1; ++b) {
            const std::byte* s = src + (off + a0 + b * sb) * static_cast<int64_t>(ES);
            for (int64_t a = a0; a < a1; ++a, s += ES) std::memcpy(plane + (a * n + b) * static_cast<int64_t>(ES), s, ES);
          }
        }
        KILN_RETURN_IF_ERROR(poll.Tick((a1 - a0) * n));
      }
      NextIndex(idx, outer);
    }
    return Status::Ok();
  }

  std::vector<Segment> segs;
  bool by_segment = false;
  if (!inner.table.empty()) {
    segs = Segments(inner.table);
    by_segment = static_cast<int64_t>(segs.size()) * 4 <= n;
  }
  Shape outer(dims.begin(), dims.end() - 1);
  int64_t rows = 1;
  for (int64_t d : outer) rows *= d;
  std::vector<int64_t> idx(outer.size(), 0);
  for (int64_t row = 0; row < rows; ++row) {
    std::byte* out = dst + row * n * static_cast<int64_t>(ES);
    int64_t off = base;
    bool filled = false;
    for (size_t d = 0; d < outer.size(); ++d) {
      if (maps[d].table.empty()) {
        off += idx[d] * maps[d].stride;
      } else if (maps[d].table[idx[d]] == kFill) {
        filled = true;
        break;
      } else {
        off += maps[d].table[idx[d]];
      }
    }
    if (filled) {
      FillRow<ES>(out, n, fill);
    } else if (inner.table.empty()) {
      if (inner.stride == 1) {
        std::memcpy(out, src + off * static_cast<int64_t>(ES), static_cast<size_t>(n) * ES);
      } else {
        const std::byte* s = src + off * static_cast<int64_t>(ES);
        const int64_t step = inner.stride * static_cast<int64_t>(ES);
        for (int64_t o = 0; o < n; ++o, s += step) std::memcpy(out + o * static_cast<int64_t>(ES), s, ES);
      }
    } else if (by_segment) {
      for (const Segment& sg : segs) {
        std::byte* o = out + sg.out * static_cast<int64_t>(ES);
        if (sg.src == kFill) {
          FillRow<ES>(o, sg.len, fill);
        } else {
          std::memcpy(o, src + (off + sg.src) * static_cast<int64_t>(ES), static_cast<size_t>(sg.len) * ES);
        }
      }
    } else {
      for (int64_t o = 0; o < n; ++o) {
        const int64_t t = inner.table[o];
        std::memcpy(out + o * static_cast<int64_t>(ES), t == kFill ? fill : src + (off + t) * static_cast<int64_t>(ES),
                    ES);
      }
    }
    KILN_RETURN_IF_ERROR(poll.Tick(n));
    NextIndex(idx, outer);
  }
  return Status::Ok();
}

// lo / hi += the smallest / largest offset `m` gives over `len` indices (len >= 1); false on
// overflow. *all_fill: every entry of m's table is kFill.
bool AddRange(const DimMap& m, int64_t len, int64_t& lo, int64_t& hi, bool& all_fill) {
  int64_t mn = 0, mx = 0;
  if (m.table.empty()) {
    int64_t span = 0;
    if (__builtin_mul_overflow(m.stride, len - 1, &span)) return false;
    (span < 0 ? mn : mx) = span;
  } else {
    bool any = false;
    for (int64_t t : m.table) {
      if (t == kFill) continue;
      mn = any ? std::min(mn, t) : t;
      mx = any ? std::max(mx, t) : t;
      any = true;
    }
    if (!any) all_fill = true;
  }
  return !__builtin_add_overflow(lo, mn, &lo) && !__builtin_add_overflow(hi, mx, &hi);
}

}  // namespace

std::vector<DimMap> StridedMaps(const std::vector<int64_t>& strides) {
  std::vector<DimMap> maps(strides.size());
  for (size_t d = 0; d < strides.size(); ++d) maps[d].stride = strides[d];
  return maps;
}

Status MoveElements(const Tensor& x, int64_t base, std::vector<DimMap> maps, const std::byte* fill, Tensor& y,
                    const device::CancelToken* cancel) {
  return MoveElements(x, base, std::move(maps), y.shape(), fill, y, cancel);
}

Status MoveElements(const Tensor& x, int64_t base, std::vector<DimMap> maps, const Shape& view, const std::byte* fill,
                    Tensor& y, const device::CancelToken* cancel) {
  if (x.dtype() != y.dtype()) return Internal("MoveElements: element types differ");
  if (maps.size() != view.size()) return Internal("MoveElements: one map per output dim");
  auto count = device::ShapeElementCount(view);
  if (!count.ok() || *count != y.num_elements()) return Internal("MoveElements: view and output sizes differ");
  if (y.num_elements() == 0) return Status::Ok();
  const size_t es = device::DataTypeSize(x.dtype());
  int64_t lo = base, hi = base;
  bool all_fill = false, any_fill = false;
  for (size_t d = 0; d < maps.size(); ++d) {
    const int64_t len = view[d];
    if (!maps[d].table.empty() && static_cast<int64_t>(maps[d].table.size()) != len) {
      return Internal("MoveElements: table size differs from the output dim");
    }
    if (!AddRange(maps[d], len, lo, hi, all_fill)) return Internal("MoveElements: offsets overflow");
    any_fill = any_fill || std::find(maps[d].table.begin(), maps[d].table.end(), kFill) != maps[d].table.end();
  }
  if (any_fill && fill == nullptr) return Internal("MoveElements: a fill entry without a fill value");
  if (all_fill) {
    std::byte* p = y.raw().data();
    for (int64_t i = 0; i < y.num_elements(); ++i) std::memcpy(p + i * static_cast<int64_t>(es), fill, es);
    return Status::Ok();
  }
  if (lo < 0 || hi >= x.num_elements()) return Internal("MoveElements: offsets outside the source");

  // Simplify: size-1 dims fold into `base`; adjacent strided dims that are contiguous relative
  // to each other merge (fewer, longer rows).
  Shape dims;
  std::vector<DimMap> simple;
  for (size_t d = 0; d < maps.size(); ++d) {
    const int64_t len = view[d];
    if (len == 1) {
      if (!maps[d].table.empty()) base += maps[d].table[0];  // not kFill: all_fill handled above
      continue;
    }
    if (!simple.empty() && simple.back().table.empty() && maps[d].table.empty() &&
        simple.back().stride == maps[d].stride * len) {
      dims.back() *= len;
      simple.back().stride = maps[d].stride;
      continue;
    }
    dims.push_back(len);
    simple.push_back(std::move(maps[d]));
  }
  if (dims.empty()) {
    dims.push_back(1);
    simple.emplace_back();
  }
  CancelPoll poll(cancel);
  const std::byte* src = x.raw().data();
  std::byte* dst = y.raw().data();
  switch (es) {
    case 1: return Copy<1>(src, dst, base, dims, simple, fill, poll);
    case 2: return Copy<2>(src, dst, base, dims, simple, fill, poll);
    case 4: return Copy<4>(src, dst, base, dims, simple, fill, poll);
    case 8: return Copy<8>(src, dst, base, dims, simple, fill, poll);
    default: return Internal("MoveElements: unsupported element size");
  }
}

}  // namespace kiln::runtime::host_kernels
