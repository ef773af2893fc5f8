// The per-level matrix products (level_kernels.cc, built per level and element type), chosen at
// each call by cpu_level().
#ifndef TFAOT_RUNTIME_KERNELS_MATMUL_DISPATCH_H_
#define TFAOT_RUNTIME_KERNELS_MATMUL_DISPATCH_H_

#include <cstdint>

#include "level_dispatch.h"

namespace tfaot_runtime {

// out[m x n] = op(lhs) * op(rhs), all column-major, op() transposing where asked.
template <typename T>
using Matmul = void(T* out, const T* lhs, const T* rhs, int64_t m, int64_t n, int64_t k, int transpose_lhs,
                    int transpose_rhs);

}  // namespace tfaot_runtime

extern "C" {
tfaot_runtime::Matmul<float> tfaot_matmul_f32_x86_64, tfaot_matmul_f32_x86_64_v3, tfaot_matmul_f32_x86_64_v4;
tfaot_runtime::Matmul<double> tfaot_matmul_f64_x86_64, tfaot_matmul_f64_x86_64_v3, tfaot_matmul_f64_x86_64_v4;
}

namespace tfaot_runtime {

inline Matmul<float>* level_matmul(float* /*type*/) {
  return by_level<Matmul<float>>(tfaot_matmul_f32_x86_64, TFAOT_BUILT_V3(tfaot_matmul_f32_x86_64_v3),
                                 TFAOT_BUILT_V4(tfaot_matmul_f32_x86_64_v4));
}

inline Matmul<double>* level_matmul(double* /*type*/) {
  return by_level<Matmul<double>>(tfaot_matmul_f64_x86_64, TFAOT_BUILT_V3(tfaot_matmul_f64_x86_64_v3),
                                  TFAOT_BUILT_V4(tfaot_matmul_f64_x86_64_v4));
}

template <typename T>
inline void matmul(T* out, const T* lhs, const T* rhs, int64_t m, int64_t n, int64_t k, bool transpose_lhs,
                   bool transpose_rhs) {
  level_matmul(out)(out, lhs, rhs, m, n, k, transpose_lhs, transpose_rhs);
}

}  // namespace tfaot_runtime

#endif  // TFAOT_RUNTIME_KERNELS_MATMUL_DISPATCH_H_
