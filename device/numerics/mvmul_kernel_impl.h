// Internal to device/numerics/mvmul_kernel*.cc: the four implementations of RunKBlockPhases, and
// the AVX-512 forms of PrepareSrcBGroups and ElwaddRow, behind the dispatch in mvmul_kernel.cc.
// Arguments are already validated there (see mvmul_kernel.h).
// Section numbers (§) cite docs/specs/tt-numerics.md.
#pragma once

#include <cstdint>

#include "device/numerics/fpu.h"
#include "device/numerics/mvmul_kernel.h"

// Whether this build has the AVX-512 FP16 path: GCC 12 or later on x86-64. Clang 14 (the fuzz
// builds') offers AVX512-FP16's intrinsics only where the whole file is compiled with -mavx512fp16
// and does not know the feature's name for __builtin_cpu_supports, so its builds leave it out.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define KILN_MVMUL_AVX512FP16 1
#else
#define KILN_MVMUL_AVX512FP16 0
#endif

namespace kiln::numerics::mvmul_detail {

/// Exponent stored for a zero SrcA operand (mvmul_kernel.h, PreparedSrcA): with any SrcB term it
/// stays below 0, so it never raises §5.4's group maximum, and its slice is 0.
inline constexpr int32_t kZeroExp = -4096;
/// Exponent stored for a zero SrcB operand (PreparedSrcB::exp): with any SrcA exponent the lane's
/// raw exponent stays below every other lane's, and its slices are 0.
inline constexpr int32_t kZeroExpB = -8192;
/// §5.4's alignment shift cap: a product of at most 12 bits shifted right by 13 or more rounds
/// half-up to 0, so capping d at 14 (instead of the spec's 30) gives the same R in int32.
inline constexpr int32_t kMaxAlign = 14;

void RunScalar(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1, int64_t o0, int64_t o1, int p0,
               int p1, bool fp32_dst, Arch arch, uint32_t* dst);
#if defined(__x86_64__)
void RunAvx2(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1, int64_t o0, int64_t o1, int p0,
             int p1, bool fp32_dst, Arch arch, uint32_t* dst);
/// PrepareSrcBGroups (`variants` = SrcBVariants(fid)), two groups (16 operands) per step.
void PrepareSrcBGroupsAvx512(const uint32_t* x, int64_t groups, int variants, SrcFormat fmt, uint32_t* words,
                             uint8_t* nz);
/// FillSrcABlocks with a block's 32 columns gathered per k, 16 per step (32 · K < 2^31: the gather's
/// int32 offsets).
void FillSrcABlocksAvx512(const uint32_t* a, SrcFormat fmt, int64_t cb0, int64_t cb1, PreparedSrcA* out);
/// AddIntoDstRow on 16 values per step.
void AddIntoDstRowAvx512(const float* s, int64_t n, bool fp32_dst, uint32_t* dst);
/// ElwaddRow on 16 values per step.
void ElwaddRowAvx512(const uint32_t* a, const uint32_t* b, int64_t n, const FpuConfig& cfg, uint32_t* out);
void RunAvx512(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1, int64_t o0, int64_t o1, int p0,
               int p1, bool fp32_dst, Arch arch, uint32_t* dst);
#if KILN_MVMUL_AVX512FP16
/// RunAvx512 with a bf16 Dst held in int16 (mvmul_kernel_avx512fp16.cc; AVX512-FP16 and VBMI2 too);
/// an fp32 Dst, or Dst patterns with non-zero low 16 bits, go to RunAvx512.
void RunAvx512Fp16(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1, int64_t o0, int64_t o1,
                   int p0, int p1, bool fp32_dst, Arch arch, uint32_t* dst);
#endif
#endif

}  // namespace kiln::numerics::mvmul_detail
