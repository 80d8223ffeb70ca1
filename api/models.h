// Model summaries: store metadata as kiln.v1.Model (ModelService's Get/List/Upload answers).
#pragma once

#include "kiln/v1/model.pb.h"
#include "store/model_store.h"

namespace kiln::api {

/// Fills a kiln.v1.Model from store metadata.
void ToProto(const store::ModelInfo& info, kiln::v1::Model* out);

}  // namespace kiln::api
