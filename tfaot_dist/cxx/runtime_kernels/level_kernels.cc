// The runtime's matrix product for one x86-64 level and one element type. The build compiles this
// file once per level and type with
//   -march=<level> -DTFAOT_LEVEL=<suffix> -DEigen=tfaot_eigen_<suffix>
//   -DTFAOT_ELEMENT=<float|double> -DTFAOT_TYPE=<f32|f64>
// Renaming Eigen's namespace per level gives every Eigen function instantiated here a name of its
// own level: the linker can never merge, say, a v3 copy of an Eigen kernel into code that runs on a
// baseline CPU (the build checks that this object defines no other global symbol). Each type's
// objects go with its own runtime part: a model with float and double layers links both parts, and
// no symbol is defined by both.
#include <cstdint>

#include "level_product.h"

#if !defined(TFAOT_LEVEL) || !defined(TFAOT_ELEMENT) || !defined(TFAOT_TYPE)
#error "TFAOT_LEVEL, TFAOT_ELEMENT and TFAOT_TYPE must be defined by the build"
#endif
#define TFAOT_JOIN2(a, b) a##b
#define TFAOT_JOIN(a, b) TFAOT_JOIN2(a, b)
#define TFAOT_MATMUL TFAOT_JOIN(TFAOT_JOIN(TFAOT_JOIN(tfaot_matmul_, TFAOT_TYPE), _), TFAOT_LEVEL)

// out[m x n] = op(lhs) * op(rhs), all column-major, op() transposing where asked: the contract of
// XLA's CPU matmul (lhs is k x m when transposed, rhs n x k when transposed).
extern "C" void TFAOT_MATMUL(TFAOT_ELEMENT* out, const TFAOT_ELEMENT* lhs, const TFAOT_ELEMENT* rhs, int64_t m,
                             int64_t n, int64_t k, int transpose_lhs, int transpose_rhs) {
  product(out, lhs, rhs, m, n, k, transpose_lhs != 0, transpose_rhs != 0);
}
