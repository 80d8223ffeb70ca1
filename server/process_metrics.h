// The standard process_* series of Prometheus client libraries, for kilnd's /metrics (served by
// server/metrics_endpoint.h next to the registry's families). Names, types and units are those of
// the Prometheus client libraries' process collector (client_golang's process_collector.go):
//   process_cpu_seconds_total      counter  user + system CPU time (/proc/self/stat utime+stime)
//   process_resident_memory_bytes  gauge    resident set size (/proc/self/stat rss x page size)
//   process_virtual_memory_bytes   gauge    virtual memory size (/proc/self/stat vsize)
//   process_open_fds               gauge    open file descriptors (entries of /proc/self/fd)
//   process_max_fds                gauge    soft RLIMIT_NOFILE (kilnd raises it to the hard limit at start)
//   process_start_time_seconds     gauge    start time, seconds since the Unix epoch
//                                           (/proc/self/stat starttime + /proc/stat btime)
// Read on every scrape; a value that cannot be read is left out (Linux-only files).
#pragma once

#include <prometheus/metric_family.h>

#include <vector>

namespace kiln::server {

std::vector<prometheus::MetricFamily> ProcessMetricFamilies();

}  // namespace kiln::server
