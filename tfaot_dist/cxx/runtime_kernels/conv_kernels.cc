// The runtime's 2-D convolution for one x86-64 level, built like level_kernels.cc (once per level,
// -march=<level> -DTFAOT_LEVEL=<suffix> -DEigen=tfaot_eigen_<suffix>).
//
// A convolution is a matrix product: each output pixel is the row of its input patch (kernel rows x
// kernel columns x input channels) times the kernel seen as a (patch size x filters) matrix. The
// wheel's Eigen convolution forms that product over image-patch expressions, compiled for the
// baseline CPU only (about 14 % of an AVX-512 core's peak). Here the patches of a block of output
// pixels are copied into a buffer (im2col, a few hundred kilobytes, reused per thread) and
// multiplied by the level's own product (level_product.h). A 1x1 convolution with stride 1 and no
// padding needs no copy: its input already is that matrix.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "level_product.h"

#ifndef TFAOT_LEVEL
#error "TFAOT_LEVEL (the level's symbol suffix) must be defined by the build"
#endif
#define TFAOT_JOIN2(a, b) a##b
#define TFAOT_JOIN(a, b) TFAOT_JOIN2(a, b)

namespace {

// Bytes of patches per product: large enough that the product runs at its speed, small enough to
// stay in the core's L2 cache with the part of the kernel it is multiplied with.
constexpr int64_t kPatchBlockBytes = 256 * 1024;

}  // namespace

// out[batch][out_x][out_y][filters] = convolution of in[batch][in_x][in_y][channels] with
// kernel[kernel_x][kernel_y][channels][filters] (row-major, XLA's order of dimensions): output pixel
// (ox, oy) reads input (ox * stride_x - pad_x + i * dilation_x, oy * stride_y - pad_y + j * dilation_y)
// for kernel tap (i, j), zero outside the input. One feature group, no input dilation, padding >= 0
// (the dispatcher sends other convolutions to XLA's code).
extern "C" void TFAOT_JOIN(tfaot_conv2d_f32_, TFAOT_LEVEL)(
    float* out, const float* in, const float* kernel, int64_t batch, int64_t in_x, int64_t in_y, int64_t channels,
    int64_t kernel_x, int64_t kernel_y, int64_t filters, int64_t out_x, int64_t out_y, int64_t stride_x,
    int64_t stride_y, int64_t pad_x, int64_t pad_y, int64_t dilation_x, int64_t dilation_y) {
  const int64_t pixels = batch * out_x * out_y;
  const int64_t depth = kernel_x * kernel_y * channels;  // one patch
  // out^T [filters x pixels] = kernel^T [filters x depth] * patches^T [depth x pixels], column-major:
  // the same memory as the row-major matrices above.
  if (kernel_x == 1 && kernel_y == 1 && stride_x == 1 && stride_y == 1 && pad_x == 0 && pad_y == 0 &&
      out_x == in_x && out_y == in_y) {
    product(out, kernel, in, filters, pixels, depth, false, false);
    return;
  }
  // A multiple of 24 rows: whole column groups of the narrow product (3, 6, 8 or 12 columns).
  const int64_t block = std::max<int64_t>(24, kPatchBlockBytes / static_cast<int64_t>(sizeof(float) * depth) / 24 * 24);
  float* patches = kept_buffer(2, std::min(block, pixels) * depth);
  for (int64_t first = 0; first < pixels; first += block) {
    const int64_t rows = std::min(block, pixels - first);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t p = first + r;
      const int64_t b = p / (out_x * out_y);
      const int64_t ox = p / out_y % out_x;
      const int64_t oy = p % out_y;
      float* row = patches + r * depth;
      for (int64_t i = 0; i < kernel_x; ++i) {
        const int64_t ix = ox * stride_x - pad_x + i * dilation_x;
        for (int64_t j = 0; j < kernel_y; ++j) {
          const int64_t iy = oy * stride_y - pad_y + j * dilation_y;
          float* tap = row + (i * kernel_y + j) * channels;
          if (ix >= 0 && ix < in_x && iy >= 0 && iy < in_y) {
            std::memcpy(tap, in + ((b * in_x + ix) * in_y + iy) * channels, sizeof(float) * channels);
          } else {
            std::fill(tap, tap + channels, 0.0f);
          }
        }
      }
    }
    product(out + first * filters, kernel, patches, filters, rows, depth, false, false);
  }
}
