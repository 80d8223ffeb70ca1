#include "common/memory.h"

#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace kiln {
namespace {

std::string ReadSmallFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return {};
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The cgroup path of `controller` ("" for the v2 unified hierarchy) in /proc/self/cgroup.
std::optional<std::string> CgroupPath(const std::string& proc_cgroup, std::string_view controller) {
  std::istringstream in(proc_cgroup);
  std::string line;
  while (std::getline(in, line)) {
    // "hierarchy-ID:controller-list:cgroup-path" (cgroups(7))
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::string_view list(line.data() + a + 1, b - a - 1);
    if (controller.empty() ? list.empty() : (list == controller || list.find(controller) != std::string_view::npos)) {
      return line.substr(b + 1);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<uint64_t> ParseCgroupMemoryLimit(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty() || text == "max") return std::nullopt;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  if (v >= (uint64_t{1} << 62)) return std::nullopt;  // v1 reports "unlimited" as ~2^63 rounded to pages
  return v;
}

uint64_t AvailableMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t limit = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : (uint64_t{8} << 30);
  const std::string self = ReadSmallFile("/proc/self/cgroup");
  auto consider = [&](const std::string& file) {
    if (auto v = ParseCgroupMemoryLimit(ReadSmallFile(file)); v && *v < limit) limit = *v;
  };
  if (auto v2 = CgroupPath(self, ""); v2) consider("/sys/fs/cgroup" + *v2 + "/memory.max");
  if (auto v1 = CgroupPath(self, "memory"); v1) {
    consider("/sys/fs/cgroup/memory" + *v1 + "/memory.limit_in_bytes");
  }
  return limit;
}

uint64_t DefaultMemoryBudgetBytes() { return AvailableMemoryBytes() / 4 * 3; }

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  }
  return buf;
}

bool MemoryBudget::TryReserve(uint64_t bytes) {
  uint64_t cur = reserved_.load();
  do {
    if (bytes > total_ || cur > total_ - bytes) return false;
  } while (!reserved_.compare_exchange_weak(cur, cur + bytes));
  return true;
}

void MemoryBudget::Release(uint64_t bytes) { reserved_.fetch_sub(bytes); }

}  // namespace kiln
