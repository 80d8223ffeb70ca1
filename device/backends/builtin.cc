#include "device/backends/builtin.h"

#include "device/backends/reference/reference_backend.h"

namespace kiln::device {

#if KILN_HAVE_TT_EMU
Status RegisterTtEmuBackend(BackendRegistry& registry);  // defined in kiln_backend_tt_emu
#endif
#if KILN_HAVE_TTNN
Status RegisterTtnnBackend(BackendRegistry& registry);  // defined in kiln_backend_ttnn
#endif

Status RegisterBuiltinBackends(BackendRegistry& registry) {
  KILN_RETURN_IF_ERROR(RegisterReferenceBackend(registry));
#if KILN_HAVE_TT_EMU
  KILN_RETURN_IF_ERROR(RegisterTtEmuBackend(registry));
#endif
#if KILN_HAVE_TTNN
  KILN_RETURN_IF_ERROR(RegisterTtnnBackend(registry));
#endif
  return Status::Ok();
}

BackendRegistry& DefaultBackendRegistry() {
  static BackendRegistry* registry = [] {
    auto* r = new BackendRegistry();
    (void)RegisterBuiltinBackends(*r);  // a fresh registry has no name clashes
    return r;
  }();
  return *registry;
}

}  // namespace kiln::device
