// placeholder
#include "runtime/host_kernels/kernel_util.h"
namespace kiln::runtime::host_kernels {
void RegisterHostKernels_resize(HostKernelRegistry&) {}
}
