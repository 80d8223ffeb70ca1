// The registry checks of compiler/ai8x/rules (internal to that folder; rules.h is the interface).
// Each is defined in the family file its comment names and listed, in running order, in
// rules/registry.cc.
#pragma once

#include <bit>
#include <cstdint>
#include <string>

#include "compiler/ai8x/rules/rules.h"

namespace kiln::ai8x::rules {

// operators.cc
void CheckLayerCount(RuleContext& c);
void CheckChannelsAndDimensions(RuleContext& c, const Layer& l, size_t i);
void CheckKernelByOperator(RuleContext& c, const Layer& l, size_t i);
void CheckOperatorLimits(RuleContext& c, const Layer& l, size_t i);
void CheckConvAttributes(RuleContext& c, const Layer& l, size_t i);
void CheckFlatten(RuleContext& c, const Layer& l, size_t i);
void CheckOutputWidthAndQuantization(RuleContext& c, const Layer& l, size_t i);
// pooling.cc
void CheckPooling(RuleContext& c, const Layer& l, size_t i);
// output_size.cc
void CheckOutputSize(RuleContext& c, const Layer& l, size_t i);
// eltwise.cc
void CheckNotWithConv1d(RuleContext& c, const Layer& l, size_t i);
void CheckOperands(RuleContext& c, const Layer& l, size_t i);
void CheckReadGap(RuleContext& c, const Layer& l, size_t i);
// processors.cc
void CheckProcessorMaps(RuleContext& c, const Layer& l, size_t i);
void CheckPassthroughMap(RuleContext& c, const Layer& l, size_t i);
void CheckConcat(RuleContext& c, const Layer& l, size_t i);
void CheckQuadrant0(RuleContext& c);
// data_memory.cc
void CheckDataMemoryBounds(RuleContext& c, const Layer& l, size_t i);
// streaming.cc
void CheckStreaming(RuleContext& c, const Layer& l, size_t i);
void CheckFifoInput(RuleContext& c, const Layer& l, size_t i);
// kernel_memory.cc
void CheckKernelMemory(RuleContext& c, const Layer& l, size_t i);
// bias_memory.cc
void CheckBiasMemory(RuleContext& c);

}  // namespace kiln::ai8x::rules
