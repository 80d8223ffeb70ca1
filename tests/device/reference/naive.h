// Naive loop implementations of conv2d / conv_transpose2d / pool2d (double accumulation), written
// directly from the ONNX operator definitions, used as the oracle for the reference backend.
// NCHW row-major float32 tensors only.
#pragma once

#include "device/backends/backend.h"
#include "device/tensor.h"

namespace kiln::device::testing {

Tensor NaiveConv2d(const Tensor& x, const Tensor& w, const Tensor* b, const Conv2dParams& p);
Tensor NaiveConvTranspose2d(const Tensor& x, const Tensor& w, const Tensor* b, const ConvTranspose2dParams& p);
Tensor NaivePool2d(const Tensor& x, const Pool2dParams& p);

}  // namespace kiln::device::testing
