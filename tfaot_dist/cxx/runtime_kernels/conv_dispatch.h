// The per-level 2-D float convolution (conv_kernels.cc), chosen at each call by cpu_level().
#ifndef TFAOT_RUNTIME_KERNELS_CONV_DISPATCH_H_
#define TFAOT_RUNTIME_KERNELS_CONV_DISPATCH_H_

#include <cstdint>

#include "level_dispatch.h"

namespace tfaot_runtime {

// conv_kernels.cc says what the arguments are.
using Conv2d = void(float* out, const float* in, const float* kernel, int64_t batch, int64_t in_x, int64_t in_y,
                    int64_t channels, int64_t kernel_x, int64_t kernel_y, int64_t filters, int64_t out_x, int64_t out_y,
                    int64_t stride_x, int64_t stride_y, int64_t pad_x, int64_t pad_y, int64_t dilation_x,
                    int64_t dilation_y);

}  // namespace tfaot_runtime

extern "C" {
tfaot_runtime::Conv2d tfaot_conv2d_f32_x86_64, tfaot_conv2d_f32_x86_64_v3, tfaot_conv2d_f32_x86_64_v4;
}

namespace tfaot_runtime {

inline Conv2d* level_conv2d() {
  return by_level<Conv2d>(tfaot_conv2d_f32_x86_64, TFAOT_BUILT_V3(tfaot_conv2d_f32_x86_64_v3),
                          TFAOT_BUILT_V4(tfaot_conv2d_f32_x86_64_v4));
}

}  // namespace tfaot_runtime

#endif  // TFAOT_RUNTIME_KERNELS_CONV_DISPATCH_H_
