// The backends compiled into this build, registered by name (target kiln_backends).
//   "reference" — fp32 oneDNN backend (device/backends/reference/reference_backend.h); always built.
//   "tt-emu"    — Tensix emulator, when the kiln_backend_tt_emu target exists. Its library must
//                 define `kiln::Status kiln::device::RegisterTtEmuBackend(BackendRegistry&)`.
//   "ttnn"      — real card, when kiln_backend_ttnn exists; defines RegisterTtnnBackend likewise.
#pragma once

#include "common/status.h"
#include "device/backends/backend.h"

namespace kiln::device {

/// Registers every built-in backend into `registry`. Errors: ALREADY_EXISTS from Register.
Status RegisterBuiltinBackends(BackendRegistry& registry);

/// A process-wide registry holding the built-in backends (initialised on first use; thread-safe).
BackendRegistry& DefaultBackendRegistry();

}  // namespace kiln::device
