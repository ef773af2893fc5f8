// TensorFlow >= 2.16 (thunk runtime): the generated model header calls
// xla::cpu::internal::TypedMatMul<float, float, float>, which the wheel's
// dot_lib_f32.cc instantiates for the baseline CPU only. The build renames
// that instantiation to tfaot_xla_typed_matmul_f32 and this definition takes
// its place: single-threaded products (no Eigen thread pool, how tfcompile'd
// models run) go to the per-level kernels, the rest to XLA's own code.
//
// dot_lib.h is not included: it declares the float instantiation extern,
// after which a specialization is ill-formed. The declarations below are the
// header's interface, which the runtime build checks by compiling a
// consumer of both.
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
void tfaot_xla_typed_matmul_f32(const Eigen::ThreadPoolDevice* device, void* out, void* lhs, void* rhs, int64_t m,
                                int64_t n, int64_t k, bool transpose_lhs, bool transpose_rhs,
                                xla::cpu::internal::DoneCallback done) __asm__("tfaot_xla_typed_matmul_f32");

template <>
void xla::cpu::internal::TypedMatMul<float, float, float>(const Eigen::ThreadPoolDevice* device, void* out, void* lhs,
                                                          void* rhs, int64_t m, int64_t n, int64_t k,
                                                          bool transpose_lhs, bool transpose_rhs, DoneCallback done) {
  if (device != nullptr) {
    tfaot_xla_typed_matmul_f32(device, out, lhs, rhs, m, n, k, transpose_lhs, transpose_rhs, std::move(done));
    return;
  }
  tfaot_runtime::matmul_f32(static_cast<float*>(out), static_cast<const float*>(lhs),
                            static_cast<const float*>(rhs), m, n, k, transpose_lhs, transpose_rhs);
  done();
}
