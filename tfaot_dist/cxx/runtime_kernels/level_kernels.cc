// The runtime's matrix kernels for one x86-64 level. The build compiles this
// file once per level with
//   -march=<level> -DTFAOT_LEVEL=<suffix> -DEigen=tfaot_eigen_<suffix>
// Renaming Eigen's namespace per level gives every Eigen function instantiated
// here a name of its own level: the linker can never merge, say, a v3 copy of
// an Eigen kernel into code that runs on a baseline CPU (the build checks that
// this object defines no other global symbol).
#include <cstdint>

#include "level_product.h"

#ifndef TFAOT_LEVEL
#error "TFAOT_LEVEL (the level's symbol suffix) must be defined by the build"
#endif
#define TFAOT_JOIN2(a, b) a##b
#define TFAOT_JOIN(a, b) TFAOT_JOIN2(a, b)

// out[m x n] = op(lhs) * op(rhs), all column-major, op() transposing where
// asked: the contract of XLA's CPU matmul (lhs is k x m when transposed, rhs
// n x k when transposed).
extern "C" void TFAOT_JOIN(tfaot_matmul_f32_, TFAOT_LEVEL)(float* out, const float* lhs, const float* rhs,
                                                           int64_t m, int64_t n, int64_t k, int transpose_lhs,
                                                           int transpose_rhs) {
  product(out, lhs, rhs, m, n, k, transpose_lhs != 0, transpose_rhs != 0);
}
