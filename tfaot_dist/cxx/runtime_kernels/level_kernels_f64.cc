// The runtime's double matrix kernels for one x86-64 level, built like level_kernels.cc (once per
// level, -march=<level> -DTFAOT_LEVEL=<suffix> -DEigen=tfaot_eigen_<suffix>), for the runtime part of
// the wheel's double product (dot_lib_f64.cc). Its own file and objects: a model with float and
// double layers links both parts, and no symbol may be defined by both.
#include <cstdint>

#include "level_product.h"

#ifndef TFAOT_LEVEL
#error "TFAOT_LEVEL (the level's symbol suffix) must be defined by the build"
#endif
#define TFAOT_JOIN2(a, b) a##b
#define TFAOT_JOIN(a, b) TFAOT_JOIN2(a, b)

// out[m x n] = op(lhs) * op(rhs), all column-major, op() transposing where asked (XLA's contract).
extern "C" void TFAOT_JOIN(tfaot_matmul_f64_, TFAOT_LEVEL)(double* out, const double* lhs, const double* rhs,
                                                           int64_t m, int64_t n, int64_t k, int transpose_lhs,
                                                           int transpose_rhs) {
  product(out, lhs, rhs, m, n, k, transpose_lhs != 0, transpose_rhs != 0);
}
