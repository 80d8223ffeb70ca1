#include "runtime/report_table.h"

#include <iomanip>
#include <sstream>

namespace kiln::runtime {

std::string FormatReportTable(const RunResult& r) {
  std::ostringstream os;
  os << "backend " << r.backend << "  mode " << RunModeName(r.mode) << "  precision " << r.precision.ToString()
     << (r.backend_honours_precision ? "" : " (ignored: fp32 backend)") << "  folded " << r.folded_nodes << " node(s)\n";
  os << std::left << std::setw(28) << "layer" << std::setw(18) << "op" << std::setw(22) << "output" << std::right
     << std::setw(10) << "ms" << std::setw(11) << "pcc" << std::setw(12) << "max_err" << std::setw(8) << "thr"
     << std::setw(6) << "pass" << "\n";
  for (const LayerReport& l : r.layers) {
    std::string name = l.name.size() > 27 ? l.name.substr(0, 24) + "..." : l.name;
    std::string op = l.op;
    if (l.on_device && l.activation != "none") op += "+" + l.activation;
    if (!l.residual.empty()) op += "+add";
    std::string shape = l.output_shapes.empty() ? "" : device::ShapeToString(l.output_shapes[0]);
    os << std::left << std::setw(28) << name << std::setw(18) << op << std::setw(22) << shape << std::right
       << std::fixed << std::setw(10) << std::setprecision(3) << (l.seconds + l.host_seconds) * 1e3;
    if (l.compared) {
      os << std::setw(11) << std::setprecision(6) << l.pcc << std::setw(12) << std::scientific << std::setprecision(2)
         << l.max_abs_error << std::fixed;
    } else {
      os << std::setw(11) << "-" << std::setw(12) << "-";
    }
    if (l.on_device && l.compared) {
      os << std::setw(8) << std::setprecision(4) << l.threshold << std::setw(6) << (l.pass ? "yes" : "NO");
    } else {
      os << std::setw(8) << "-" << std::setw(6) << "-";
    }
    os << "\n";
  }
  os << "total " << std::fixed << std::setprecision(3) << r.total_seconds * 1e3 << " ms, "
     << (r.compared ? (r.all_pass ? "all device ops pass" : "SOME DEVICE OPS FAIL") : "not compared") << "\n";
  return os.str();
}

}  // namespace kiln::runtime
