// DepthToSpace-1/11/13 and SpaceToDepth-1/13 host kernels (onnx/docs/Operators.md), rank-4 NCHW,
// every element type, element copies (runtime/host_kernels/movement.h).
// * DepthToSpace [N, C, H, W] -> [N, C/b², H·b, W·b]: mode DCR (default; the only form before
//   opset 11) reads channel (i·b + j)·C/b² + c for output (c, h·b + i, w·b + j), mode CRD reads
//   c·b² + i·b + j — the reshape / transpose / reshape of the operator definition.
// * SpaceToDepth [N, C, H, W] -> [N, C·b², H/b, W/b]: output channel (i·b + j)·C + c reads
//   (c, h·b + i, w·b + j).
// Both maps are sums of one term per output dim, so they are DimMap tables over the output.
// Memory: the output (the input's size), 8-byte elements.
#include "runtime/host_kernels/movement.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;

Result<int64_t> BlockSize(const fe::Node& n, const Tensor& x) {
  if (x.rank() != 4) return Err(n, "input must be rank 4, got " + device::ShapeToString(x.shape()));
  auto b = n.GetInt("blocksize");
  if (!b.ok()) return Err(n, b.status().message());
  if (*b <= 0) return Err(n, "blocksize must be positive, got " + std::to_string(*b));
  return *b;
}

Out DepthToSpace(const fe::Node& n, const Tensor& x, const HostKernelContext& ctx) {
  auto bs = BlockSize(n, x);
  if (!bs.ok()) return bs.status();
  const int64_t b = *bs;
  auto mode = n.GetString("mode", "DCR");
  if (!mode.ok()) return mode.status();
  if (*mode != "DCR" && *mode != "CRD") return Err(n, "unknown mode '" + *mode + "'");
  const bool crd = *mode == "CRD";
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  if (C % (b * b) != 0) return Err(n, "channels " + std::to_string(C) + " do not divide by blocksize²");
  const int64_t oc = C / (b * b);
  const std::vector<int64_t> s = RowMajorStrides(x.shape());
  std::vector<DimMap> maps(4);
  maps[0].stride = s[0];
  maps[1].stride = (crd ? b * b : 1) * s[1];
  maps[2].table.resize(static_cast<size_t>(H * b));
  maps[3].table.resize(static_cast<size_t>(W * b));
  for (int64_t h = 0; h < H * b; ++h) maps[2].table[h] = (h / b) * s[2] + (h % b) * (crd ? b : b * oc) * s[1];
  for (int64_t w = 0; w < W * b; ++w) maps[3].table[w] = (w / b) * s[3] + (w % b) * (crd ? 1 : oc) * s[1];
  auto y = Make({N, oc, H * b, W * b}, x.dtype());
  if (!y.ok()) return y.status();
  KILN_RETURN_IF_ERROR(MoveElements(x, 0, std::move(maps), nullptr, *y, ctx.cancel));
  return Outputs(std::move(*y));
}

Out SpaceToDepth(const fe::Node& n, const Tensor& x, const HostKernelContext& ctx) {
  auto bs = BlockSize(n, x);
  if (!bs.ok()) return bs.status();
  const int64_t b = *bs;
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  if (H % b != 0 || W % b != 0) return Err(n, "spatial dims do not divide by blocksize " + std::to_string(b));
  const std::vector<int64_t> s = RowMajorStrides(x.shape());
  std::vector<DimMap> maps(4);
  maps[0].stride = s[0];
  maps[1].table.resize(static_cast<size_t>(C * b * b));
  for (int64_t o = 0; o < C * b * b; ++o) {
    const int64_t c = o % C, ij = o / C;
    maps[1].table[o] = c * s[1] + (ij / b) * s[2] + (ij % b) * s[3];
  }
  maps[2].stride = b * s[2];
  maps[3].stride = b * s[3];
  auto y = Make({N, C * b * b, H / b, W / b}, x.dtype());
  if (!y.ok()) return y.status();
  KILN_RETURN_IF_ERROR(MoveElements(x, 0, std::move(maps), nullptr, *y, ctx.cancel));
  return Outputs(std::move(*y));
}

int64_t InputBytes(const fe::Node&, const std::vector<Shape>& s) { return s.empty() ? 0 : AnyTypeBytes(s[0]); }

}  // namespace

void RegisterHostKernels_depth(HostKernelRegistry& r) {
  r.Add({{"DepthToSpace"}, InputBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "input");
           if (!x.ok()) return x.status();
           return DepthToSpace(n, **x, ctx);
         },
         AllDTypes(KernelPath::kTyped)});
  r.Add({{"SpaceToDepth"}, InputBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "input");
           if (!x.ok()) return x.status();
           return SpaceToDepth(n, **x, ctx);
         },
         AllDTypes(KernelPath::kTyped)});
}

}  // namespace kiln::runtime::host_kernels
