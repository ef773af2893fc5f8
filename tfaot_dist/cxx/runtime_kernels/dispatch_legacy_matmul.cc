// TensorFlow 2.12 (before the thunk runtime): compiled models call the C entry
// __xla_cpu_runtime_EigenSingleThreadedMatMulF32, which the wheel's
// runtime_single_threaded_matmul.cc defines for the baseline CPU only. The
// build renames that definition out of the way and this one dispatches to the
// per-level kernels.
#include <cstdint>

#include "matmul_dispatch.h"

extern "C" void __xla_cpu_runtime_EigenSingleThreadedMatMulF32(const void* /*run_options*/, float* out, float* lhs,
                                                               float* rhs, int64_t m, int64_t n, int64_t k,
                                                               int32_t transpose_lhs, int32_t transpose_rhs) {
  tfaot_runtime::matmul(out, lhs, rhs, m, n, k, transpose_lhs != 0, transpose_rhs != 0);
}
