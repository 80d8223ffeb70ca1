#include "api/lanes.h"

#include <algorithm>

namespace kiln::api {

std::vector<sched::CpuLaneSpec> KilndCpuLanes(const LaneSizes& s) {
  const int workers = std::max(1, s.compile_workers);
  return {
      {.name = kCompileLane, .workers = workers, .queue_capacity = std::max(0, s.compile_queue),
       // One client may fill the compile queue, as before the scheduler existed.
       .max_queued_per_client = std::max(1, s.compile_queue)},
      {.name = kPlanLane, .workers = workers, .queue_capacity = std::max(1, s.device_queue)},
      {.name = kStoreLane, .workers = 2, .queue_capacity = 4096, .max_queued_per_client = 4096},
  };
}

}  // namespace kiln::api
