// The per-level 2-D float convolution (conv_kernels.cc), chosen at each call by cpu_level().
#ifndef TFAOT_RUNTIME_KERNELS_CONV_DISPATCH_H_
#define TFAOT_RUNTIME_KERNELS_CONV_DISPATCH_H_

#include <cstdint>

#include "cpu_level.h"

#define TFAOT_CONV2D_PARAMETERS                                                                                  \
  float *out, const float *in, const float *kernel, int64_t batch, int64_t in_x, int64_t in_y, int64_t channels, \
      int64_t kernel_x, int64_t kernel_y, int64_t filters, int64_t out_x, int64_t out_y, int64_t stride_x,       \
      int64_t stride_y, int64_t pad_x, int64_t pad_y, int64_t dilation_x, int64_t dilation_y

extern "C" {
void tfaot_conv2d_f32_x86_64(TFAOT_CONV2D_PARAMETERS);
#if TFAOT_TOP_LEVEL >= 3
void tfaot_conv2d_f32_x86_64_v3(TFAOT_CONV2D_PARAMETERS);
#endif
#if TFAOT_TOP_LEVEL >= 4
void tfaot_conv2d_f32_x86_64_v4(TFAOT_CONV2D_PARAMETERS);
#endif
}

namespace tfaot_runtime {

inline void conv2d_f32(TFAOT_CONV2D_PARAMETERS) {
  switch (cpu_level()) {
#if TFAOT_TOP_LEVEL >= 4
    case kV4:
      return tfaot_conv2d_f32_x86_64_v4(out, in, kernel, batch, in_x, in_y, channels, kernel_x, kernel_y, filters,
                                        out_x, out_y, stride_x, stride_y, pad_x, pad_y, dilation_x, dilation_y);
#endif
#if TFAOT_TOP_LEVEL >= 3
    case kV3:
      return tfaot_conv2d_f32_x86_64_v3(out, in, kernel, batch, in_x, in_y, channels, kernel_x, kernel_y, filters,
                                        out_x, out_y, stride_x, stride_y, pad_x, pad_y, dilation_x, dilation_y);
#endif
    default:
      return tfaot_conv2d_f32_x86_64(out, in, kernel, batch, in_x, in_y, channels, kernel_x, kernel_y, filters,
                                     out_x, out_y, stride_x, stride_y, pad_x, pad_y, dilation_x, dilation_y);
  }
}

}  // namespace tfaot_runtime

#endif  // TFAOT_RUNTIME_KERNELS_CONV_DISPATCH_H_
