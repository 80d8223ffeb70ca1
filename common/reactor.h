// Reactions never block (gRPC's callback API runs them on a small, shared set of threads; see
// server/rpc_context.h). The server marks every reaction's thread with a ReactorScope; every
// blocking function (fsync, SHA-256 of a whole body, LoadModel, BuildConvPlan, the store's index
// rewrite, backend execution, file reads over 1 MiB) calls AssertNotOnReactor first. In debug
// builds (NDEBUG not defined) a violation aborts with the function's name; in every build it is
// counted (ReactorViolations()), so tests of release builds can assert there were none.
#pragma once

#include <cstdint>

namespace kiln {

/// Marks the current thread as running a gRPC reaction for the scope's lifetime (nests).
class ReactorScope {
 public:
  ReactorScope();
  ~ReactorScope();
  ReactorScope(const ReactorScope&) = delete;
  ReactorScope& operator=(const ReactorScope&) = delete;

 private:
  bool previous_;
};

/// True inside a ReactorScope on this thread.
bool OnReactorThread();

/// See the header comment. `what` names the blocking function ("LoadModel").
void AssertNotOnReactor(const char* what);

/// Blocking calls made on a reactor thread since the process started.
uint64_t ReactorViolations();

}  // namespace kiln
