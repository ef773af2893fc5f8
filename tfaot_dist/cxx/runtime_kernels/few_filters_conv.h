// The direct 2-D convolution for few filters (issue 39), for conv_kernels.cc: stride 1, no dilation,
// float, [batch][x][y][channels] in, [batch][x][y][filters] out, kernel [x][y][channels][filters].
// Everything here has internal linkage (see level_product.h): each level's object has its own copy.
//
// With 16-32 filters the patch product fills one or two vectors of filters per pixel and is bound by
// loads (one FMA per broadcast patch element), and the patch matrix is 9x the input. Here output pixels
// run along the vector instead, and no patch matrix is made. benchmarks/conv_few_filters.cc times this
// file against the patch product (benchmarks/results/2026-11-27-few-filter-conv.md).
#ifndef TFAOT_RUNTIME_KERNELS_FEW_FILTERS_CONV_H_
#define TFAOT_RUNTIME_KERNELS_FEW_FILTERS_CONV_H_

#include <algorithm>
#include <cstdint>

#include <Eigen/Core>

namespace {

constexpr int64_t kDirectMaxTaps = 64;  // kernel_x * kernel_y: the caller checks

// How: each image is copied once into channel planes with its zero padding (rows of out_y + kernel_y - 1
// floats), so kernel tap (i, j) is the offset i * row + j into a plane and taps outside the image read
// zeros. The output is computed in the same flat indexing (pixel (ox, oy) at ox * row + oy; the
// kernel_y - 1 columns past out_y in each row are computed and dropped) into filter planes, then
// written back as [pixel][filter]. A register block of PV vectors of pixels x FB filters is
// accumulated over (tap, channel): PV loads and FB broadcasts feed PV * FB FMAs. The weights of a block
// of filters are repacked contiguous as [tap][channel][FB] (zeros past the last filter).
template <int PV, int FB>
void direct_block(float* out_planes, int64_t out_plane, const float* in_planes, int64_t in_plane, const float* weights,
                  const int64_t* offsets, int64_t taps, int64_t channels, int64_t q) {
  using P = Eigen::internal::packet_traits<float>::type;
  constexpr int W = Eigen::internal::unpacket_traits<P>::size;
  P acc[PV][FB];
#pragma GCC unroll 16
  for (int f = 0; f < FB; ++f) {
#pragma GCC unroll 16
    for (int v = 0; v < PV; ++v) acc[v][f] = Eigen::internal::pset1<P>(0.0f);
  }
  const float* w = weights;
  for (int64_t t = 0; t < taps; ++t) {
    const float* src = in_planes + q + offsets[t];
    for (int64_t c = 0; c < channels; ++c, src += in_plane, w += FB) {
      P x[PV];
#pragma GCC unroll 16
      for (int v = 0; v < PV; ++v) x[v] = Eigen::internal::ploadu<P>(src + v * W);
#pragma GCC unroll 16
      for (int f = 0; f < FB; ++f) {
        const P b = Eigen::internal::pset1<P>(w[f]);
#pragma GCC unroll 16
        for (int v = 0; v < PV; ++v) acc[v][f] = Eigen::internal::pmadd(x[v], b, acc[v][f]);
      }
    }
  }
#pragma GCC unroll 16
  for (int f = 0; f < FB; ++f) {
#pragma GCC unroll 16
    for (int v = 0; v < PV; ++v) Eigen::internal::pstoreu(out_planes + f * out_plane + q + v * W, acc[v][f]);
  }
}

// Filter planes [filters][count] of the pixels [0, count) of one image: blocks of PV vectors, the rest by one.
template <int PV, int FB>
void direct_filters(float* out_planes, int64_t out_plane, const float* in_planes, int64_t in_plane,
                    const float* weights, const int64_t* offsets, int64_t taps, int64_t channels, int64_t count) {
  constexpr int W = Eigen::internal::unpacket_traits<Eigen::internal::packet_traits<float>::type>::size;
  int64_t q = 0;
  for (; q + PV * W <= count; q += PV * W)
    direct_block<PV, FB>(out_planes, out_plane, in_planes, in_plane, weights, offsets, taps, channels, q);
  for (; q < count; q += W)
    direct_block<1, FB>(out_planes, out_plane, in_planes, in_plane, weights, offsets, taps, channels, q);
}

// The buffer the direct convolution needs, in floats (in_planes, out_planes, weights).
struct DirectLayout {
  int64_t row, in_plane, out_plane, count, blocks;
};

template <int PV, int FB>
DirectLayout direct_layout(int64_t kernel_x, int64_t kernel_y, int64_t filters, int64_t out_x, int64_t out_y) {
  constexpr int64_t W = Eigen::internal::unpacket_traits<Eigen::internal::packet_traits<float>::type>::size;
  DirectLayout l;
  l.row = out_y + kernel_y - 1;
  l.count = out_x * l.row;
  // Reads reach the last vector's end plus the largest tap offset; planes start on a 64-byte boundary.
  l.in_plane = ((out_x + kernel_x - 1) * l.row + kernel_y + W + 15) / 16 * 16;
  l.out_plane = ((l.count + W - 1) / W * W + 15) / 16 * 16;
  l.blocks = (filters + FB - 1) / FB;
  return l;
}

template <int PV, int FB>
void direct_conv(float* out, const float* in, const float* kernel, int64_t batch, int64_t in_x, int64_t in_y,
                 int64_t channels, int64_t kernel_x, int64_t kernel_y, int64_t filters, int64_t out_x, int64_t out_y,
                 int64_t pad_x, int64_t pad_y, float* buffer) {
  const DirectLayout l = direct_layout<PV, FB>(kernel_x, kernel_y, filters, out_x, out_y);
  const int64_t taps = kernel_x * kernel_y;
  float* in_planes = buffer;
  float* out_planes = in_planes + channels * l.in_plane;
  float* weights = out_planes + l.blocks * FB * l.out_plane;
  int64_t offsets[kDirectMaxTaps];
  for (int64_t t = 0; t < taps; ++t) offsets[t] = t / kernel_y * l.row + t % kernel_y;
  for (int64_t b = 0; b < l.blocks; ++b) {
    float* w = weights + b * taps * channels * FB;
    for (int64_t tc = 0; tc < taps * channels; ++tc) {
      for (int64_t f = 0; f < FB; ++f) {
        const int64_t filter = b * FB + f;
        w[tc * FB + f] = filter < filters ? kernel[tc * filters + filter] : 0.0f;
      }
    }
  }
  std::fill(in_planes, in_planes + channels * l.in_plane, 0.0f);  // the padding stays zero for every image
  // The input rows and columns inside the padded image (padding after the input may be negative).
  const int64_t rows = std::min(in_x, out_x + kernel_x - 1 - pad_x), cols = std::min(in_y, l.row - pad_y);
  for (int64_t n = 0; n < batch; ++n) {
    const float* image = in + n * in_x * in_y * channels;
    for (int64_t x = 0; x < rows; ++x) {
      for (int64_t y = 0; y < cols; ++y) {
        const float* pixel = image + (x * in_y + y) * channels;
        float* to = in_planes + (x + pad_x) * l.row + y + pad_y;
        for (int64_t c = 0; c < channels; ++c) to[c * l.in_plane] = pixel[c];
      }
    }
    for (int64_t b = 0; b < l.blocks; ++b)
      direct_filters<PV, FB>(out_planes + b * FB * l.out_plane, l.out_plane, in_planes, l.in_plane,
                             weights + b * taps * channels * FB, offsets, taps, channels, l.count);
    float* result = out + n * out_x * out_y * filters;
    for (int64_t x = 0; x < out_x; ++x) {
      for (int64_t y = 0; y < out_y; ++y) {
        const float* from = out_planes + x * l.row + y;
        float* to = result + (x * out_y + y) * filters;
        for (int64_t f = 0; f < filters; ++f) to[f] = from[f * l.out_plane];
      }
    }
  }
}

template <int PV, int FB>
int64_t direct_buffer_floats(int64_t channels, int64_t kernel_x, int64_t kernel_y, int64_t filters, int64_t out_x,
                             int64_t out_y) {
  const DirectLayout l = direct_layout<PV, FB>(kernel_x, kernel_y, filters, out_x, out_y);
  return channels * l.in_plane + l.blocks * FB * (l.out_plane + kernel_x * kernel_y * channels);
}

}  // namespace

#endif  // TFAOT_RUNTIME_KERNELS_FEW_FILTERS_CONV_H_
