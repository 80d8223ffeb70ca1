// The advisor's messages (proto/kiln/v1/job.proto AdviseRequest, AdviseResult) <-> its types
// (api/advisor/advise.h): one conversion for kilnd's advise jobs (api/jobs.cc) and for the CLI
// that prints their answers (cli/advise_command.cc), so a job's answer prints as `--local`'s.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "api/advisor/advise.h"
#include "common/status.h"
#include "kiln/v1/job.pb.h"

namespace kiln::api::advisor {

/// What a search needs besides the plan: its options and input sets.
struct AdviseSpec {
  AdviseOptions options;
  std::vector<runtime::RunInputs> inputs;  ///< each set's tensors as float32 (as `kiln advise --local` reads them)
};

/// The options and input sets of `request` (not model_id). An empty tt_emu_level becomes the level
/// of `tt_emu_settings` (the settings kilnd's tt-emu devices were made with; api/run_conv.h
/// ResolveTtEmuLevel). INVALID_ARGUMENT naming the field: a target outside (0, 1], an unknown
/// space knob, a negative or non-finite budget, a negative max_refine_runs, an unknown level, a
/// malformed tensor or one named twice in a set.
Result<AdviseSpec> AdviseSpecFromProto(const kiln::v1::AdviseRequest& request,
                                       const std::map<std::string, std::string>& tt_emu_settings);

/// A layer configuration as a Precision with the knobs of the space only (the
/// RunConvLayersRequest.layer_precision value that runs it), and back. LayerConfigFromProto:
/// INVALID_ARGUMENT for an unset math_fidelity or weights_dtype, or an out-of-range value.
kiln::v1::Precision LayerConfigToProto(const LayerConfig& config);
Result<LayerConfig> LayerConfigFromProto(const kiln::v1::Precision& precision);

/// The answer as a message (`budget_seconds`: the request's, echoed), and back.
/// AdviseResultFromProto: INVALID_ARGUMENT for a layer configuration it cannot read.
void AdviseResultToProto(const AdviseResult& result, double budget_seconds, kiln::v1::AdviseResult* out);
Result<AdviseResult> AdviseResultFromProto(const kiln::v1::AdviseResult& result);

/// "fidelity,weights" of a message's `space` (none: "fidelity,weights", the default).
std::string SpaceSpec(const google::protobuf::RepeatedPtrField<std::string>& space);

}  // namespace kiln::api::advisor
