#include "runtime/host_kernels/onednn_util.h"

#include <algorithm>
#include <string>

#include <omp.h>

namespace kiln::runtime::host_kernels {

dnnl::memory::desc DnnDesc(const Shape& shape, dnnl::memory::data_type dt) {
  dnnl::memory::dims dims(std::max<size_t>(shape.size(), 1), 1);
  std::copy(shape.begin(), shape.end(), dims.begin());
  dnnl::memory::dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * std::max<int64_t>(dims[i + 1], 1);
  return dnnl::memory::desc(dims, dt, strides);
}

dnnl::memory DnnMem(const dnnl::memory::desc& md, const void* data) {
  return dnnl::memory(md, DnnEngine(), const_cast<void*>(data));
}

namespace {
// Runs the calling thread's OpenMP regions on one thread while alive (oneDNN here uses OpenMP).
class SingleThread {
 public:
  SingleThread() : prev_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~SingleThread() { omp_set_num_threads(prev_); }
  SingleThread(const SingleThread&) = delete;
  SingleThread& operator=(const SingleThread&) = delete;

 private:
  int prev_;
};
}  // namespace

void DnnExecute(const dnnl::primitive& prim, const std::unordered_map<int, dnnl::memory>& args) {
  size_t bytes = 0;
  for (const auto& [arg, mem] : args) bytes = std::max(bytes, mem.get_desc().get_size());
  dnnl::stream s(DnnEngine());
  if (bytes < kDnnSingleThreadBytes && omp_get_max_threads() > 1) {
    SingleThread one;
    prim.execute(s, args);
    s.wait();
    return;
  }
  prim.execute(s, args);
  s.wait();
}

Status ForRowChunks(int64_t rows, int64_t row_elems, const device::CancelToken* cancel,
                    const std::function<Status(int64_t, int64_t)>& fn) {
  const int64_t per = std::max<int64_t>(1, kCancelPollWork / std::max<int64_t>(row_elems, 1));
  CancelPoll poll(cancel);
  for (int64_t r0 = 0; r0 < rows; r0 += per) {
    const int64_t cnt = std::min(per, rows - r0);
    KILN_RETURN_IF_ERROR(fn(r0, cnt));
    KILN_RETURN_IF_ERROR(poll.Tick(cnt * std::max<int64_t>(row_elems, 1)));
  }
  return Status::Ok();
}

bool IsDnnFloat(device::DataType d) {
  return d == device::DataType::kFloat32 || d == device::DataType::kFloat16 || d == device::DataType::kBFloat16;
}

Result<Tensor> FromFloat32(Tensor y, device::DataType dtype) {
  if (dtype == device::DataType::kFloat32) return y;
  return y.CastTo(dtype);
}

}  // namespace kiln::runtime::host_kernels
