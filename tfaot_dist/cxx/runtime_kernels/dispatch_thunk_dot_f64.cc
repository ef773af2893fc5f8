// TensorFlow >= 2.16 (thunk runtime): the double product, as dispatch_thunk_dot.cc does the float one.
// The wheel's dot_lib_f64.cc instantiates xla::cpu::internal::TypedMatMul<double, double, double> for
// the baseline CPU only (SSE2: two doubles per instruction); the build renames that instantiation to
// tfaot_xla_typed_matmul_f64 and this definition takes its place. dot_lib.h is not included (see
// dispatch_thunk_dot.cc).
#include <cstdint>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "matmul_dispatch.h"

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
void tfaot_xla_typed_matmul_f64(const Eigen::ThreadPoolDevice* device, void* out, void* lhs, void* rhs, int64_t m,
                                int64_t n, int64_t k, bool transpose_lhs, bool transpose_rhs,
                                xla::cpu::internal::DoneCallback done) __asm__("tfaot_xla_typed_matmul_f64");

template <>
void xla::cpu::internal::TypedMatMul<double, double, double>(const Eigen::ThreadPoolDevice* device, void* out,
                                                             void* lhs, void* rhs, int64_t m, int64_t n, int64_t k,
                                                             bool transpose_lhs, bool transpose_rhs,
                                                             DoneCallback done) {
  if (device != nullptr) {
    tfaot_xla_typed_matmul_f64(device, out, lhs, rhs, m, n, k, transpose_lhs, transpose_rhs, std::move(done));
    return;
  }
  tfaot_runtime::matmul_f64(static_cast<double*>(out), static_cast<const double*>(lhs),
                            static_cast<const double*>(rhs), m, n, k, transpose_lhs, transpose_rhs);
  done();
}
