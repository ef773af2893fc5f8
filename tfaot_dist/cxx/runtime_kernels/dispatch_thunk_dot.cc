// TensorFlow >= 2.16 (thunk runtime): the generated model header calls
// xla::cpu::internal::TypedMatMul<T, T, T> for float and double, which the wheel's dot_lib_f32.cc
// and dot_lib_f64.cc instantiate for the baseline CPU only (SSE2). The build compiles this file once
// per element type (-DTFAOT_ELEMENT=<float|double> -DTFAOT_TYPE=<f32|f64>), renames that type's
// instantiation to tfaot_xla_typed_matmul_<type>, and this definition takes its place:
// single-threaded products (no Eigen thread pool, how tfcompile'd models run) go to the per-level
// kernels, the rest to XLA's own code.
//
// dot_lib.h is not included: it declares the instantiations extern, after which a specialization
// is ill-formed. The declarations below are the header's interface, which the runtime build checks
// by compiling a consumer of both.
#include <cstdint>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "matmul_dispatch.h"

#if !defined(TFAOT_ELEMENT) || !defined(TFAOT_TYPE)
#error "TFAOT_ELEMENT and TFAOT_TYPE must be defined by the build"
#endif
#define TFAOT_STR2(a) #a
#define TFAOT_STR(a) TFAOT_STR2(a)
#define TFAOT_JOIN2(a, b) a##b
#define TFAOT_JOIN(a, b) TFAOT_JOIN2(a, b)
#define TFAOT_XLA_MATMUL TFAOT_JOIN(tfaot_xla_typed_matmul_, TFAOT_TYPE)

namespace Eigen {
struct ThreadPoolDevice;
}

namespace xla::cpu::internal {

using DoneCallback = absl::AnyInvocable<void()>;

template <typename LhsType, typename RhsType, typename OutType>
void TypedMatMul(const Eigen::ThreadPoolDevice* device, void* out, void* lhs, void* rhs, int64_t m, int64_t n,
                 int64_t k, bool transpose_lhs, bool transpose_rhs, DoneCallback done);

}  // namespace xla::cpu::internal

// XLA's instantiation, renamed by the build.
void TFAOT_XLA_MATMUL(const Eigen::ThreadPoolDevice* device, void* out, void* lhs, void* rhs, int64_t m, int64_t n,
                      int64_t k, bool transpose_lhs, bool transpose_rhs,
                      xla::cpu::internal::DoneCallback done) __asm__(TFAOT_STR(TFAOT_XLA_MATMUL));

template <>
void xla::cpu::internal::TypedMatMul<TFAOT_ELEMENT, TFAOT_ELEMENT, TFAOT_ELEMENT>(
    const Eigen::ThreadPoolDevice* device, void* out, void* lhs, void* rhs, int64_t m, int64_t n, int64_t k,
    bool transpose_lhs, bool transpose_rhs, DoneCallback done) {
  if (device != nullptr) {
    TFAOT_XLA_MATMUL(device, out, lhs, rhs, m, n, k, transpose_lhs, transpose_rhs, std::move(done));
    return;
  }
  tfaot_runtime::matmul(static_cast<TFAOT_ELEMENT*>(out), static_cast<const TFAOT_ELEMENT*>(lhs),
                        static_cast<const TFAOT_ELEMENT*>(rhs), m, n, k, transpose_lhs, transpose_rhs);
  done();
}
