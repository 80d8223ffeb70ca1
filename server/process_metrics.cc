#include "server/process_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace kiln::server {
namespace {

// /proc/self/stat's fields from the third on (proc(5): the command name in field 2 may hold
// spaces and parentheses, so split after its last ')'): field N is at index N - 3.
std::vector<std::string> StatFields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  std::getline(in, line);
  auto close = line.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string f; rest >> f;) fields.push_back(f);
  return fields;
}

std::optional<double> Field(const std::vector<std::string>& fields, size_t n) {
  if (n < 3 || n - 3 >= fields.size()) return std::nullopt;
  try {
    return std::stod(fields[n - 3]);
  } catch (...) {
    return std::nullopt;
  }
}

std::optional<double> BootTimeSeconds() {
  std::ifstream in("/proc/stat");
  for (std::string key; in >> key;) {
    if (key == "btime") {
      double v = 0;
      if (in >> v) return v;
      return std::nullopt;
    }
    in.ignore(1 << 20, '\n');
  }
  return std::nullopt;
}

void Add(std::vector<prometheus::MetricFamily>& out, const char* name, const char* help,
         prometheus::MetricType type, std::optional<double> value) {
  if (!value) return;
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = *value;
  } else {
    m.gauge.value = *value;
  }
  f.metric.push_back(std::move(m));
  out.push_back(std::move(f));
}

}  // namespace

std::vector<prometheus::MetricFamily> ProcessMetricFamilies() {
  using prometheus::MetricType;
  const auto fields = StatFields();
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  std::vector<prometheus::MetricFamily> out;
  auto utime = Field(fields, 14), stime = Field(fields, 15);
  Add(out, "process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", MetricType::Counter,
      utime && stime && ticks > 0 ? std::optional<double>((*utime + *stime) / ticks) : std::nullopt);
  auto rss = Field(fields, 24);
  Add(out, "process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::Gauge,
      rss ? std::optional<double>(*rss * page) : std::nullopt);
  Add(out, "process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::Gauge, Field(fields, 23));
  std::error_code ec;
  double open = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) ++open;
  // The iterator's own descriptor is counted, as client_golang's readdir of /proc/self/fd does.
  Add(out, "process_open_fds", "Number of open file descriptors.", MetricType::Gauge,
      ec ? std::nullopt : std::optional<double>(open));
  rlimit lim{};
  Add(out, "process_max_fds", "Maximum number of open file descriptors.", MetricType::Gauge,
      getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY
          ? std::optional<double>(static_cast<double>(lim.rlim_cur))
          : std::nullopt);
  static const std::optional<double> start = [&]() -> std::optional<double> {
    auto boot = BootTimeSeconds();
    auto since_boot = Field(fields, 22);
    if (!boot || !since_boot || ticks <= 0) return std::nullopt;
    return *boot + *since_boot / ticks;
  }();
  Add(out, "process_start_time_seconds", "Start time of the process since unix epoch in seconds.", MetricType::Gauge,
      start);
  return out;
}

}  // namespace kiln::server
