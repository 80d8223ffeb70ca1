#include "api/lanes.h"

#include <algorithm>
#include <thread>

#include "device/backends/builtin.h"

namespace kiln::api {

std::vector<sched::CpuLaneSpec> KilndCpuLanes(const LaneSizes& s) {
  const int workers = std::max(1, s.compile_workers);
  const int plan_queue = std::max(1, s.plan_queue > 0 ? s.plan_queue : s.device_queue);
  return {
      {.name = kCompileLane, .workers = workers, .queue_capacity = std::max(0, s.compile_queue),
       // One client may fill the compile queue, as before the scheduler existed.
       .max_queued_per_client = std::max(1, s.compile_queue)},
      {.name = kPlanLane, .workers = workers, .queue_capacity = plan_queue, .max_queued_per_client = plan_queue},
      {.name = kStoreLane, .workers = 2, .queue_capacity = 4096, .max_queued_per_client = 4096},
  };
}

Result<sched::SchedulerOptions> KilndSchedulerOptions(const KilndSchedule& schedule) {
  auto devices = sched::ParseDeviceList(schedule.devices);
  if (!devices.ok()) return devices.status().WithContext("--devices");
  sched::SchedulerOptions o;
  o.devices = *devices;
  o.queue_capacity = schedule.lanes.device_queue;
  LaneSizes lanes = schedule.lanes;
  lanes.plan_queue = 0;
  for (const auto& spec : *devices) lanes.plan_queue += lanes.device_queue + spec.count;
  o.cpu_lanes = KilndCpuLanes(lanes);
  int reference_workers = 1;
  for (const auto& spec : *devices) {
    if (device::IsFp32Reference(spec.backend)) reference_workers = spec.count;
  }
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  o.reference_threads = schedule.reference_threads > 0 ? schedule.reference_threads : std::max(1, cores / reference_workers);
  for (const auto& spec : *devices) {
    if (spec.backend == device::kTtEmuBackend && !schedule.tt_emu_level.empty()) {
      o.backend_settings[spec.backend][device::kTtEmuLevelSetting] = schedule.tt_emu_level;
    }
    if (device::IsFp32Reference(spec.backend)) {
      o.backend_settings[spec.backend][device::kReferenceThreadsSetting] = std::to_string(o.reference_threads);
    }
  }
  return o;
}

}  // namespace kiln::api
