// The float and double matrix products of one x86-64 level, for the per-level kernel sources
// (level_kernels.cc, conv_kernels.cc): everything here has internal linkage,
// so each object that includes it carries its own copy, compiled for its own level (the build
// compiles those sources with -march=<level> -DEigen=tfaot_eigen_<suffix>).
#ifndef TFAOT_RUNTIME_KERNELS_LEVEL_PRODUCT_H_
#define TFAOT_RUNTIME_KERNELS_LEVEL_PRODUCT_H_

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

namespace {
// Products with few columns (a dense layer at batch sizes 2-4: out = weights x inputs, m outputs,
// n events) go to few_columns: Eigen's general product packs the whole lhs, the layer's weights,
// on every call, which costs more than the product itself, and made batch size 2 slower per event
// than batch size 1. Up to 4 columns few_columns is faster on every level (layers of 128-512 units:
// 1.2-4.2x, benchmarks/few_columns.py); from 6 on Eigen's product catches up.

// Rows [i, m) of out[m x N] = lhs[m x k] * rhs[k x N] (column-major) in tiles of TV packets of type P; returns
// the first row that fills no tile. A tile stays in registers for all N columns while the columns of lhs
// stream by: each weight is read once.
template <int N, int TV, typename P, typename T>
int64_t few_columns_tiles(T* out, const T* lhs, const T* rhs, int64_t m, int64_t k, int64_t i) {
  constexpr int kPacket = Eigen::internal::unpacket_traits<P>::size;
  constexpr int kRows = kPacket * TV;
  for (; i + kRows <= m; i += kRows) {
    P acc[N][TV];
#pragma GCC unroll 16
    for (int j = 0; j < N; ++j) {
#pragma GCC unroll 16
      for (int t = 0; t < TV; ++t) acc[j][t] = Eigen::internal::pset1<P>(T(0));
    }
    for (int64_t p = 0; p < k; ++p) {
      const T* column = lhs + p * m + i;
      P a[TV];
#pragma GCC unroll 16
      for (int t = 0; t < TV; ++t) a[t] = Eigen::internal::ploadu<P>(column + kPacket * t);
#pragma GCC unroll 16
      for (int j = 0; j < N; ++j) {
        const P b = Eigen::internal::pset1<P>(rhs[j * k + p]);
#pragma GCC unroll 16
        for (int t = 0; t < TV; ++t) acc[j][t] = Eigen::internal::pmadd(a[t], b, acc[j][t]);
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < N; ++j) {
#pragma GCC unroll 16
      for (int t = 0; t < TV; ++t) Eigen::internal::pstoreu(out + j * m + i + kPacket * t, acc[j][t]);
    }
  }
  return i;
}

// out[m x N] = lhs[m x k] * rhs[k x N]: tiles of TV packets, then the rows left in one packet, a half and a
// quarter packet (AVX-512: 16, 8, 4 rows), and the last 0-3 rows one by one. Rows that fill no tile were all
// scalar before: an LSTM's 600 gate rows left 24 of them on AVX-512, half of the DeepJet-like model's time.
template <int N, int TV, typename T>
void few_columns(T* out, const T* lhs, const T* rhs, int64_t m, int64_t k) {
  using Packet = typename Eigen::internal::packet_traits<T>::type;
  using Half = typename Eigen::internal::unpacket_traits<Packet>::half;
  using Quarter = typename Eigen::internal::unpacket_traits<Half>::half;
  int64_t i = few_columns_tiles<N, TV, Packet>(out, lhs, rhs, m, k, 0);
  if constexpr (TV > 1) i = few_columns_tiles<N, 1, Packet>(out, lhs, rhs, m, k, i);
  if constexpr (!std::is_same_v<Half, Packet>) i = few_columns_tiles<N, 1, Half>(out, lhs, rhs, m, k, i);
  if constexpr (!std::is_same_v<Quarter, Half>) i = few_columns_tiles<N, 1, Quarter>(out, lhs, rhs, m, k, i);
  for (; i < m; ++i) {
    for (int j = 0; j < N; ++j) {
      T sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += lhs[p * m + i] * rhs[j * k + p];
      out[j * m + i] = sum;
    }
  }
}

// True if few_columns computed the product (tiles of at most 8 accumulators: 16 vector registers).
template <typename T>
bool few_columns_product(T* out, const T* lhs, const T* rhs, int64_t m, int64_t n, int64_t k) {
  switch (n) {
    case 2:
      few_columns<2, 4>(out, lhs, rhs, m, k);
      return true;
    case 3:
      few_columns<3, 2>(out, lhs, rhs, m, k);
      return true;
    case 4:
      few_columns<4, 2>(out, lhs, rhs, m, k);
      return true;
    default:
      return false;
  }
}

// Products of few rows and many columns: a layer of at most 4 vectors of units applied to many rows at
// once (the edge layers of a kNN model: 32-64 units, 8-64 inputs, tens of thousands of edges). Eigen's
// product packs all of the many columns (the inputs) for rows that fill only part of its 48-row tiles
// (AVX-512); here the weights stay in the cache and each group of NC columns is one few_columns pass:
// TV vectors of rows times NC columns of accumulators, each input read once per row tile.
template <int TV, int R, typename T>
void narrow_rest(T* out, const T* lhs, const T* rhs, int64_t m, int64_t r, int64_t k) {
  if constexpr (R > 0) {
    if (r == R) {
      few_columns<R, TV>(out, lhs, rhs, m, k);
    } else {
      narrow_rest<TV, R - 1>(out, lhs, rhs, m, r, k);
    }
  }
}

template <int TV, int NC, typename T>
void narrow(T* out, const T* lhs, const T* rhs, int64_t m, int64_t n, int64_t k) {
  int64_t j = 0;
  for (; j + NC <= n; j += NC) few_columns<NC, TV>(out + j * m, lhs, rhs + j * k, m, k);
  // The last n % NC columns in one pass too: one column at a time left 4 dependent FMA chains.
  narrow_rest<TV, NC - 1>(out + j * m, lhs, rhs + j * k, m, n - j, k);
}

// True if narrow computed the product: m a multiple of the tile's rows, at most 4 vectors of them (and so
// the weights at most 4 vectors x k), many columns. Accumulators: 24 of 32 registers on AVX-512, 12 of 16.
template <typename T>
bool narrow_product(T* out, const T* lhs, const T* rhs, int64_t m, int64_t n, int64_t k) {
  constexpr int kPacket = Eigen::internal::packet_traits<T>::size;
  constexpr bool kWide = Eigen::internal::packet_traits<float>::size >= 16;  // AVX-512: 32 vector registers
  if (n < 16 || k > 1024 || m % kPacket != 0 || m > 4 * kPacket) return false;
  switch (m / kPacket) {
    case 4:
      kWide ? narrow<4, 6>(out, lhs, rhs, m, n, k) : narrow<4, 3>(out, lhs, rhs, m, n, k);
      return true;
    case 2:
      kWide ? narrow<2, 12>(out, lhs, rhs, m, n, k) : narrow<2, 6>(out, lhs, rhs, m, n, k);
      return true;
    case 1:
      narrow<1, 8>(out, lhs, rhs, m, n, k);
      return true;
    default:  // 3 vectors: TV 3 is not instantiated; Eigen's product
      return false;
  }
}
}  // namespace

namespace {

// Buffers kept per thread from call to call, per element type and slot: 0 and 1 Eigen's packing, 2
// convolution patches.
// A plain array of Eigen's aligned memory: a std::vector here would instantiate a weak library
// function compiled for this level, which the linker could hand to code of another level.
template <typename T>
struct KeptBuffer {
  T* data = nullptr;
  Eigen::Index size = 0;
  ~KeptBuffer() { Eigen::internal::aligned_free(data); }
};

template <typename T>
T* kept_buffer(int slot, Eigen::Index count) {
  thread_local KeptBuffer<T> kept[3];
  KeptBuffer<T>& b = kept[slot];
  if (b.size < count) {
    Eigen::internal::aligned_free(b.data);
    b.data = static_cast<T*>(Eigen::internal::aligned_malloc(sizeof(T) * count));
    b.size = count;
  }
  return b.data;
}

// Eigen's blocking, with its packing buffers kept from call to call. Eigen's product allocates and
// frees them on every call; above glibc's mmap threshold that gave each call fresh pages from the
// kernel: 68 page faults per 256 x 256 x 256 product, whose speed fell from 85-97 GFLOP/s (64 and
// 1024 columns) to 62 on an AVX-512 core (the 12 x 256 study model at batch size 256 ran at 0.44
// of the peak).
template <typename T>
class KeptBlocking : public Eigen::internal::level3_blocking<T, T> {
 public:
  KeptBlocking(Eigen::Index m, Eigen::Index n, Eigen::Index k) {
    this->m_mc = m;
    this->m_nc = n;
    this->m_kc = k;
    Eigen::internal::computeProductBlockingSizes<T, T, 1>(this->m_kc, this->m_mc, this->m_nc, Eigen::Index{1});
    this->m_blockA = kept_buffer<T>(0, this->m_mc * this->m_kc);
    this->m_blockB = kept_buffer<T>(1, this->m_kc * this->m_nc);
  }
};

template <int LhsOrder, int RhsOrder, typename T>
void blocked_product(T* out, const T* lhs, Eigen::Index lhs_stride, const T* rhs, Eigen::Index rhs_stride,
                     Eigen::Index m, Eigen::Index n, Eigen::Index k) {
  std::fill(out, out + m * n, T(0));  // Eigen's kernel adds to the result
  KeptBlocking<T> blocking(m, n, k);
  Eigen::internal::general_matrix_matrix_product<Eigen::Index, T, LhsOrder, false, T, RhsOrder, false, Eigen::ColMajor,
                                                 1>::run(m, n, k, lhs, lhs_stride, rhs, rhs_stride, out, 1, m, T(1),
                                                         blocking, nullptr);
}

// out[m x n] = op(lhs) * op(rhs), all column-major, op() transposing where asked: the contract of
// XLA's CPU matmul (lhs is k x m when transposed, rhs n x k when transposed).
template <typename T>
void product(T* out, const T* lhs, const T* rhs, int64_t m, int64_t n, int64_t k, bool transpose_lhs,
             bool transpose_rhs) {
  if (!transpose_lhs && !transpose_rhs &&
      (few_columns_product(out, lhs, rhs, m, n, k) || narrow_product(out, lhs, rhs, m, n, k))) {
    return;
  }
  if (m == 0 || n == 0) {
    return;
  }
  if (k == 0) {
    std::fill(out, out + m * n, T(0));
    return;
  }
  // A transposed column-major operand is the same memory read row-major.
  constexpr int kCol = Eigen::ColMajor;
  constexpr int kRow = Eigen::RowMajor;
  if (transpose_lhs && transpose_rhs) {
    blocked_product<kRow, kRow>(out, lhs, k, rhs, n, m, n, k);
  } else if (transpose_lhs) {
    blocked_product<kRow, kCol>(out, lhs, k, rhs, k, m, n, k);
  } else if (transpose_rhs) {
    blocked_product<kCol, kRow>(out, lhs, m, rhs, n, m, n, k);
  } else {
    blocked_product<kCol, kCol>(out, lhs, m, rhs, k, m, n, k);
  }
}

}  // namespace

#endif  // TFAOT_RUNTIME_KERNELS_LEVEL_PRODUCT_H_
