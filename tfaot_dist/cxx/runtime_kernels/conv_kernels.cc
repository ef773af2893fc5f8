// The runtime's 2-D convolution for one x86-64 level, built like level_kernels.cc (once per level,
// -march=<level> -DTFAOT_LEVEL=<suffix> -DEigen=tfaot_eigen_<suffix>).
//
// A convolution is a matrix product: each output pixel is the row of its input patch (kernel rows x
// kernel columns x input channels) times the kernel seen as a (patch size x filters) matrix. The
// wheel's Eigen convolution forms that product over image-patch expressions, compiled for the
// baseline CPU only (about 14 % of an AVX-512 core's peak). Here the patches of a block of output
// pixels are copied into a buffer (im2col, a few hundred kilobytes, reused per thread) and
// multiplied by the level's own product (level_product.h). A 1x1 convolution with stride 1 and no
// padding needs no copy: its input already is that matrix. With few filters (FewFilters below) a
// stride-1 convolution runs directly instead, output pixels along the vector (few_filters_conv.h).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "few_filters_conv.h"
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

// Patches are made of short runs (a few input channels: 3 floats for an RGB-like first layer), too
// short for a call to memcpy or memset to pay: plain loops, which GCC would otherwise turn back into
// those calls. The convolution carries the same attribute: GCC inlines only between functions
// compiled with the same options, and a call per run costs as much as the copy.
#if defined(__GNUC__) && !defined(__clang__)
#define TFAOT_NO_LIBC_CALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define TFAOT_NO_LIBC_CALLS
#endif

// With AVX2 or AVX-512 a run is copied a whole vector (Eigen's packet of the level: 8 or 16 floats)
// at a time: the input is read under a mask (no read past the run, which may end the input), and
// the vector is stored whole. The store may pass the run's end by less than a vector: the patch
// buffer is filled in address order, so what lies there is written again by a later run, or is the
// buffer's slack (kSlack floats past the patches).
#if defined(__AVX2__)
using Floats = Eigen::internal::packet_traits<float>::type;
using Lanes = Eigen::internal::unpacket_traits<Floats>::mask_t;  // one bit per float
constexpr int64_t kWidth = Eigen::internal::unpacket_traits<Floats>::size;
static_assert(kWidth == 8 || kWidth == 16, "AVX2 or AVX-512 packets");
inline Floats load_first(const float* from, int64_t n) {
  return Eigen::internal::ploadu<Floats>(from, static_cast<Lanes>((1u << n) - 1u));
}
inline void store(float* to, Floats v) { Eigen::internal::pstoreu(to, v); }
inline Floats load(const float* from) { return Eigen::internal::ploadu<Floats>(from); }
inline Floats zeros() { return Eigen::internal::pzero(Floats()); }
#else
constexpr int64_t kWidth = 1;  // baseline x86-64: element by element
#endif
constexpr int64_t kSlack = 16;

// The direct convolution's register block and the filter counts it takes, by level: where
// benchmarks/conv_few_filters.cc timed it faster than the patch product (results/2026-11-27-few-filter-conv.md):
// on AVX-512 (32 registers: 3 pixel vectors x 8 filters) up to 32 filters, on AVX2 (16 registers: 2 x 6) up
// to 16. Below 8 filters most of a block would be zeros. Baseline x86-64 (SSE, no FMA)
// keeps the patch product.
#if defined(__AVX512F__)
constexpr int kDirectPixelVectors = 3, kDirectFilters = 8;
constexpr int64_t kDirectMaxFilters = 32;
#elif defined(__AVX2__)
constexpr int kDirectPixelVectors = 2, kDirectFilters = 6;
constexpr int64_t kDirectMaxFilters = 16;
#endif
constexpr int64_t kDirectMinFilters = 8;

TFAOT_NO_LIBC_CALLS void copy_run(float* to, const float* from, int64_t n) {
  if (n >= 64) {
    std::memcpy(to, from, sizeof(float) * n);
    return;
  }
#if defined(__AVX2__)
  for (; n > kWidth; n -= kWidth, to += kWidth, from += kWidth) store(to, load(from));
  store(to, load_first(from, n));
#else
  for (int64_t k = 0; k < n; ++k) to[k] = from[k];
#endif
}

TFAOT_NO_LIBC_CALLS void zero_run(float* to, int64_t n) {
#if defined(__AVX2__)
  for (int64_t k = 0; k < n; k += kWidth) store(to + k, zeros());
#else
  for (int64_t k = 0; k < n; ++k) to[k] = 0.0f;
#endif
}

}  // namespace

// out[batch][out_x][out_y][filters] = convolution of in[batch][in_x][in_y][channels] with
// kernel[kernel_x][kernel_y][channels][filters] (row-major, XLA's order of dimensions): output pixel
// (ox, oy) reads input (ox * stride_x - pad_x + i * dilation_x, oy * stride_y - pad_y + j * dilation_y)
// for kernel tap (i, j), zero outside the input. One feature group, no input dilation, padding >= 0
// (the dispatcher sends other convolutions to XLA's code).
extern "C" TFAOT_NO_LIBC_CALLS void TFAOT_JOIN(tfaot_conv2d_f32_, TFAOT_LEVEL)(
    float* out, const float* in, const float* kernel, int64_t batch, int64_t in_x, int64_t in_y, int64_t channels,
    int64_t kernel_x, int64_t kernel_y, int64_t filters, int64_t out_x, int64_t out_y, int64_t stride_x,
    int64_t stride_y, int64_t pad_x, int64_t pad_y, int64_t dilation_x, int64_t dilation_y) {
  const int64_t pixels = batch * out_x * out_y;
  const int64_t depth = kernel_x * kernel_y * channels;  // one patch
  // out^T [filters x pixels] = kernel^T [filters x depth] * patches^T [depth x pixels], column-major:
  // the same memory as the row-major matrices above.
  if (kernel_x == 1 && kernel_y == 1 && stride_x == 1 && stride_y == 1 && pad_x == 0 && pad_y == 0 && out_x == in_x &&
      out_y == in_y) {
    product(out, kernel, in, filters, pixels, depth, false, false);
    return;
  }
#if defined(__AVX2__)
  if (stride_x == 1 && stride_y == 1 && dilation_x == 1 && dilation_y == 1 && filters >= kDirectMinFilters &&
      filters <= kDirectMaxFilters && kernel_x * kernel_y <= kDirectMaxTaps) {
    constexpr int PV = kDirectPixelVectors, FB = kDirectFilters;
    float* buffer =
        kept_buffer<float>(2, direct_buffer_floats<PV, FB>(channels, kernel_x, kernel_y, filters, out_x, out_y));
    direct_conv<PV, FB>(out, in, kernel, batch, in_x, in_y, channels, kernel_x, kernel_y, filters, out_x, out_y, pad_x,
                        pad_y, buffer);
    return;
  }
#endif
  // A multiple of 24 rows: whole column groups of the narrow product (3, 6, 8 or 12 columns).
  const int64_t block = std::max<int64_t>(24, kPatchBlockBytes / static_cast<int64_t>(sizeof(float) * depth) / 24 * 24);
  float* patches = kept_buffer<float>(2, std::min(block, pixels) * depth + kSlack);
  for (int64_t first = 0; first < pixels; first += block) {
    const int64_t rows = std::min(block, pixels - first);
    // Pixel first + r is (b, ox, oy), counted up without a division per pixel.
    int64_t b = first / (out_x * out_y), ox = first / out_y % out_x, oy = first % out_y;
    for (int64_t r = 0; r < rows; ++r) {
      float* row = patches + r * depth;
      const int64_t first_y = oy * stride_y - pad_y;
      // The taps of one kernel row are one run of the input when they are adjacent and all inside it.
      const bool whole_rows = dilation_y == 1 && first_y >= 0 && first_y + kernel_y <= in_y;
      for (int64_t i = 0; i < kernel_x; ++i) {
        const int64_t ix = ox * stride_x - pad_x + i * dilation_x;
        float* taps = row + i * kernel_y * channels;
        if (ix < 0 || ix >= in_x) {
          zero_run(taps, kernel_y * channels);
          continue;
        }
        const float* line = in + (b * in_x + ix) * in_y * channels;
        if (whole_rows) {
          copy_run(taps, line + first_y * channels, kernel_y * channels);
          continue;
        }
        for (int64_t j = 0; j < kernel_y; ++j) {
          const int64_t iy = first_y + j * dilation_y;
          if (iy >= 0 && iy < in_y) {
            copy_run(taps + j * channels, line + iy * channels, channels);
          } else {
            zero_run(taps + j * channels, channels);
          }
        }
      }
      if (++oy == out_y) {
        oy = 0;
        if (++ox == out_x) {
          ox = 0;
          ++b;
        }
      }
    }
    product(out + first * filters, kernel, patches, filters, rows, depth, false, false);
  }
}
