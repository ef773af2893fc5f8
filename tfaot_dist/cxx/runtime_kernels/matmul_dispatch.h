// The per-level float and double matrix products, chosen at each call by cpu_level().
#ifndef TFAOT_RUNTIME_KERNELS_MATMUL_DISPATCH_H_
#define TFAOT_RUNTIME_KERNELS_MATMUL_DISPATCH_H_

#include <cstdint>

#include "cpu_level.h"

extern "C" {
void tfaot_matmul_f32_x86_64(float* out, const float* lhs, const float* rhs, int64_t m, int64_t n, int64_t k,
                             int transpose_lhs, int transpose_rhs);
#if TFAOT_TOP_LEVEL >= 3
void tfaot_matmul_f32_x86_64_v3(float* out, const float* lhs, const float* rhs, int64_t m, int64_t n, int64_t k,
                                int transpose_lhs, int transpose_rhs);
#endif
#if TFAOT_TOP_LEVEL >= 4
void tfaot_matmul_f32_x86_64_v4(float* out, const float* lhs, const float* rhs, int64_t m, int64_t n, int64_t k,
                                int transpose_lhs, int transpose_rhs);
#endif
void tfaot_matmul_f64_x86_64(double* out, const double* lhs, const double* rhs, int64_t m, int64_t n, int64_t k,
                             int transpose_lhs, int transpose_rhs);
#if TFAOT_TOP_LEVEL >= 3
void tfaot_matmul_f64_x86_64_v3(double* out, const double* lhs, const double* rhs, int64_t m, int64_t n, int64_t k,
                                int transpose_lhs, int transpose_rhs);
#endif
#if TFAOT_TOP_LEVEL >= 4
void tfaot_matmul_f64_x86_64_v4(double* out, const double* lhs, const double* rhs, int64_t m, int64_t n, int64_t k,
                                int transpose_lhs, int transpose_rhs);
#endif
}

namespace tfaot_runtime {

inline void matmul_f32(float* out, const float* lhs, const float* rhs, int64_t m, int64_t n, int64_t k,
                       bool transpose_lhs, bool transpose_rhs) {
  switch (cpu_level()) {
#if TFAOT_TOP_LEVEL >= 4
    case kV4:
      return tfaot_matmul_f32_x86_64_v4(out, lhs, rhs, m, n, k, transpose_lhs, transpose_rhs);
#endif
#if TFAOT_TOP_LEVEL >= 3
    case kV3:
      return tfaot_matmul_f32_x86_64_v3(out, lhs, rhs, m, n, k, transpose_lhs, transpose_rhs);
#endif
    default:
      return tfaot_matmul_f32_x86_64(out, lhs, rhs, m, n, k, transpose_lhs, transpose_rhs);
  }
}

inline void matmul_f64(double* out, const double* lhs, const double* rhs, int64_t m, int64_t n, int64_t k,
                       bool transpose_lhs, bool transpose_rhs) {
  switch (cpu_level()) {
#if TFAOT_TOP_LEVEL >= 4
    case kV4:
      return tfaot_matmul_f64_x86_64_v4(out, lhs, rhs, m, n, k, transpose_lhs, transpose_rhs);
#endif
#if TFAOT_TOP_LEVEL >= 3
    case kV3:
      return tfaot_matmul_f64_x86_64_v3(out, lhs, rhs, m, n, k, transpose_lhs, transpose_rhs);
#endif
    default:
      return tfaot_matmul_f64_x86_64(out, lhs, rhs, m, n, k, transpose_lhs, transpose_rhs);
  }
}

}  // namespace tfaot_runtime

#endif  // TFAOT_RUNTIME_KERNELS_MATMUL_DISPATCH_H_
