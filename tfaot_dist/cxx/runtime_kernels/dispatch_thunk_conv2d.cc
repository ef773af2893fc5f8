// TensorFlow >= 2.16 (thunk runtime): the generated model header calls
// xla::cpu::internal::EigenConv2D<float>, which the wheel's convolution_lib_f32_2d.cc
// instantiates for the baseline CPU only. The build renames that instantiation to
// tfaot_xla_eigen_conv2d_f32 and this definition takes its place: single-threaded
// convolutions (no Eigen thread pool, how tfcompile'd models run) of one feature group,
// without input dilation (transposed convolutions) and without negative padding go to the
// per-level kernels (conv_kernels.cc), the rest to XLA's own code.
//
// convolution_lib.h is not included: it declares the float instantiation extern, after
// which a specialization is ill-formed. The declarations below are the header's interface,
// which the runtime build checks by compiling a consumer of both.
#include <cstdint>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "conv_dispatch.h"

namespace Eigen {
struct ThreadPoolDevice;
}

namespace xla::cpu::internal {

using DoneCallback = absl::AnyInvocable<void()>;

template <typename ScalarType>
void EigenConv2D(const Eigen::ThreadPoolDevice* device, ScalarType* out, const ScalarType* lhs, const ScalarType* rhs,
                 int64_t input_batch, int64_t input_x, int64_t input_y, int64_t input_channels, int64_t kernel_x,
                 int64_t kernel_y, int64_t kernel_channels, int64_t kernel_filters, int64_t output_x, int64_t output_y,
                 int64_t x_stride, int64_t y_stride, int64_t padding_x_before, int64_t padding_x_after,
                 int64_t padding_y_before, int64_t padding_y_after, int64_t lhs_x_dilation, int64_t lhs_y_dilation,
                 int64_t rhs_x_dilation, int64_t rhs_y_dilation, int64_t feature_group_count, DoneCallback done);

}  // namespace xla::cpu::internal

// XLA's instantiation, renamed by the build.
void tfaot_xla_eigen_conv2d_f32(const Eigen::ThreadPoolDevice* device, float* out, const float* lhs, const float* rhs,
                                int64_t input_batch, int64_t input_x, int64_t input_y, int64_t input_channels,
                                int64_t kernel_x, int64_t kernel_y, int64_t kernel_channels, int64_t kernel_filters,
                                int64_t output_x, int64_t output_y, int64_t x_stride, int64_t y_stride,
                                int64_t padding_x_before, int64_t padding_x_after, int64_t padding_y_before,
                                int64_t padding_y_after, int64_t lhs_x_dilation, int64_t lhs_y_dilation,
                                int64_t rhs_x_dilation, int64_t rhs_y_dilation, int64_t feature_group_count,
                                xla::cpu::internal::DoneCallback done) __asm__("tfaot_xla_eigen_conv2d_f32");

template <>
void xla::cpu::internal::EigenConv2D<float>(const Eigen::ThreadPoolDevice* device, float* out, const float* lhs,
                                            const float* rhs, int64_t input_batch, int64_t input_x, int64_t input_y,
                                            int64_t input_channels, int64_t kernel_x, int64_t kernel_y,
                                            int64_t kernel_channels, int64_t kernel_filters, int64_t output_x,
                                            int64_t output_y, int64_t x_stride, int64_t y_stride,
                                            int64_t padding_x_before, int64_t padding_x_after, int64_t padding_y_before,
                                            int64_t padding_y_after, int64_t lhs_x_dilation, int64_t lhs_y_dilation,
                                            int64_t rhs_x_dilation, int64_t rhs_y_dilation, int64_t feature_group_count,
                                            DoneCallback done) {
  const bool ours = device == nullptr && feature_group_count == 1 && kernel_channels == input_channels &&
                    lhs_x_dilation == 1 && lhs_y_dilation == 1 && padding_x_before >= 0 && padding_y_before >= 0 &&
                    x_stride > 0 && y_stride > 0 && rhs_x_dilation > 0 && rhs_y_dilation > 0;
  if (!ours) {
    tfaot_xla_eigen_conv2d_f32(device, out, lhs, rhs, input_batch, input_x, input_y, input_channels, kernel_x, kernel_y,
                               kernel_channels, kernel_filters, output_x, output_y, x_stride, y_stride,
                               padding_x_before, padding_x_after, padding_y_before, padding_y_after, lhs_x_dilation,
                               lhs_y_dilation, rhs_x_dilation, rhs_y_dilation, feature_group_count, std::move(done));
    return;
  }
  tfaot_runtime::level_conv2d()(out, lhs, rhs, input_batch, input_x, input_y, input_channels, kernel_x, kernel_y,
                                kernel_filters, output_x, output_y, x_stride, y_stride, padding_x_before,
                                padding_y_before, rhs_x_dilation, rhs_y_dilation);
  done();
}
