// Text rendering of a plan run's report (runtime/executor.h RunResult), for `kiln run --report
// table`, `make demo` and the developer tools.
#pragma once

#include <string>

#include "runtime/executor.h"

namespace kiln::runtime {

/// A fixed-width text table: a header line (backend, mode, precision), one row per layer (name,
/// op with "+activation" / "+add", first output shape, ms = device + host time, PCC, max error,
/// threshold, pass; "-" where not compared or not a device op) and a total line.
std::string FormatReportTable(const RunResult& result);

}  // namespace kiln::runtime
