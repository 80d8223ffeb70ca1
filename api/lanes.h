// kilnd's CPU lanes of the scheduler (sched/scheduler.h) and how the configuration sizes them.
// Device lanes are named by their backend (--devices).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sched/scheduler.h"

namespace kiln::api {

/// ai8x compiles (CompileService): --compile-workers running, --compile-queue waiting.
inline constexpr const char* kCompileLane = "compile";
/// The first stage of a run (read the model, load, plan) when its plan is not cached.
inline constexpr const char* kPlanLane = "plan";
/// The store's blocking work: upload commit (fsync, SHA-256 check, ONNX parse), DeleteModel's
/// index rewrite, GetModel's inline bytes. Its own lane with a queue as deep as it needs, so
/// that a full compile queue never delays or refuses an upload (uploads never answered
/// RESOURCE_EXHAUSTED for a busy server, only for the store's size limits).
inline constexpr const char* kStoreLane = "store";

struct LaneSizes {
  int compile_workers = 2;
  int compile_queue = 16;
  int device_queue = 64;  ///< runs queued per backend (device lanes)
  /// Runs the plan lane holds: 0 = device_queue; kilnd passes every device lane's queue plus its
  /// devices (KilndSchedulerOptions).
  int plan_queue = 0;
};

/// The CPU lanes of kilnd: compile as configured; plan with as many workers as compile, a queue
/// of plan_queue and no per-client quota of its own (the device lanes keep theirs), so a run is
/// only refused where it was before the plan stage existed: by its own backend's queue; store
/// with 2 workers and a queue of 4096 (bounded by the open upload streams in practice).
std::vector<sched::CpuLaneSpec> KilndCpuLanes(const LaneSizes& sizes);

/// kilnd's scheduler, from its configuration.
struct KilndSchedule {
  std::string devices;        ///< --devices, "tt-emu:1,reference:1"
  LaneSizes lanes;
  int reference_threads = 0;  ///< --reference-threads; 0 = the cores / the reference workers
  std::string tt_emu_level;   ///< --tt-emu-level
};
/// Device lanes from the device list, the CPU lanes above, the tt-emu level, and the OpenMP
/// threads of every fp32 reference worker (the configured reference devices, or the one the
/// scheduler keeps for PCC): by default the cores divided among them, so that several reference
/// workers do not each start a team of every core. INVALID_ARGUMENT for a bad device list.
Result<sched::SchedulerOptions> KilndSchedulerOptions(const KilndSchedule& schedule);

}  // namespace kiln::api
