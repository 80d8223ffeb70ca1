// The backends compiled into this build (target kiln_backends): their registry names, the setting
// keys they declare, the default backend, and the registry that holds them.
//   "reference" — fp32 oneDNN backend (device/backends/reference/reference_backend.h); always built.
//                 Setting "threads".
//   "tt-emu"    — Tensix emulator, when the kiln_backend_tt_emu target exists. Its library must
//                 define `kiln::Status kiln::device::RegisterTtEmuBackend(BackendRegistry&)`.
//                 Setting "level".
//   "ttnn"      — real card, when kiln_backend_ttnn exists; defines RegisterTtnnBackend likewise.
// Each backend declares its settings (default and one-line help) when it registers:
// DefaultBackendRegistry().Settings(name). Code outside device/backends names a built-in backend
// or setting through the constants below rather than string literals (tests may spell the public
// names they assert).
#pragma once

#include <string_view>

#include "common/status.h"
#include "device/backends/backend.h"

namespace kiln::device {

/// Registry names of the built-in backends.
inline constexpr char kReferenceBackend[] = "reference";
inline constexpr char kTtEmuBackend[] = "tt-emu";

/// reference: OpenMP threads per op (BackendOptions::settings key; default "0" = all cores).
inline constexpr char kReferenceThreadsSetting[] = "threads";
/// tt-emu: numerics level, "exact" (default) or "fast" (BackendOptions::settings key).
inline constexpr char kTtEmuLevelSetting[] = "level";

/// The backend a run uses when the request names none: tt-emu (also in a build without it;
/// creating it then fails NOT_FOUND, listing the backends that are built).
inline constexpr const char* DefaultBackendName() { return kTtEmuBackend; }

/// True for the fp32 reference backend. It computes every op in float32 whatever
/// ExecContext::precision says (capabilities().honours_precision is false), so a run on it is its
/// own PCC reference and its results carry no device precision.
inline bool IsFp32Reference(std::string_view backend_name) { return backend_name == kReferenceBackend; }

/// Registers every built-in backend into `registry`. Errors: ALREADY_EXISTS from Register.
Status RegisterBuiltinBackends(BackendRegistry& registry);

/// A process-wide registry holding the built-in backends (initialised on first use; thread-safe).
BackendRegistry& DefaultBackendRegistry();

}  // namespace kiln::device
