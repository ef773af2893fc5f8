// Issue 39 prototype: a stride-1 3x3 "same" convolution, NHWC float, few filters.
//   (a) patches: the patch matrix [N*H*W][9*C] copied, then one Eigen GEMM by the
//       weights [9*C][F] (what tfaot_dist/cxx/runtime_kernels/conv_kernels.cc does);
//   (b) direct: output pixels along the vector, no patch matrix. Each image is
//       copied once into channel planes with a zero border, so a tap is a pointer
//       offset into a plane and taps outside the image read the border's zeros;
//       a register block of PV pixel vectors x FB filters is accumulated over
//       (tap, channel): PV loads + FB broadcasts feed PV*FB FMAs.
//   (c) block: the runtime's direct kernel, tfaot_dist/cxx/runtime_kernels/few_filters_conv.h (issue 39):
//       any kernel size and padding at stride 1, a bigger register block (x86-64-v4: 3 pixel vectors x
//       8 filters; x86-64-v3: 2 x 6), weights of a block contiguous [tap][c][FB], templates on the block
//       so -O2 (the runtime's level) unrolls it. Built at -O2 here for that reason.
// All checked against a naive loop (max abs diff). Standalone but for (c).
#include <Eigen/Core>

#include "../tfaot_dist/cxx/runtime_kernels/few_filters_conv.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#if defined(__AVX512F__)
constexpr int VW = 16;
constexpr int PV = 4;  // 4 x 4 accumulators of 32 zmm registers
#else
constexpr int VW = 8;
constexpr int PV = 3;  // 3 x 4 accumulators of 16 ymm registers
#endif
constexpr int FB = 4;
typedef float vec __attribute__((vector_size(VW * 4)));

static inline vec loadu(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

#if defined(__AVX512F__)
constexpr int kPV = 3, kFB = 8;
#else
constexpr int kPV = 2, kFB = 6;
#endif

struct Shape {
  int n, h, w, c, f;
};

static void naive(const Shape& s, const float* in, const float* wt, float* out) {
  for (int n = 0; n < s.n; ++n)
    for (int y = 0; y < s.h; ++y)
      for (int x = 0; x < s.w; ++x)
        for (int f = 0; f < s.f; ++f) {
          double acc = 0;
          for (int ky = 0; ky < 3; ++ky)
            for (int kx = 0; kx < 3; ++kx) {
              int iy = y + ky - 1, ix = x + kx - 1;
              if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
              for (int c = 0; c < s.c; ++c)
                acc += double(in[((n * s.h + iy) * s.w + ix) * s.c + c]) * wt[((ky * 3 + kx) * s.c + c) * s.f + f];
            }
          out[((n * s.h + y) * s.w + x) * s.f + f] = float(acc);
        }
}

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

static void patches(const Shape& s, const float* in, const float* wt, float* out, std::vector<float>& p) {
  const int k = 9 * s.c;
  for (int n = 0; n < s.n; ++n)
    for (int y = 0; y < s.h; ++y)
      for (int x = 0; x < s.w; ++x) {
        float* row = &p[size_t((n * s.h + y) * s.w + x) * k];
        for (int ky = 0; ky < 3; ++ky)
          for (int kx = 0; kx < 3; ++kx) {
            int iy = y + ky - 1, ix = x + kx - 1;
            float* dst = row + (ky * 3 + kx) * s.c;
            if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w)
              std::memset(dst, 0, sizeof(float) * s.c);
            else
              std::memcpy(dst, &in[((n * s.h + iy) * s.w + ix) * s.c], sizeof(float) * s.c);
          }
      }
  const int m = s.n * s.h * s.w;
  Eigen::Map<const RowMajor> P(p.data(), m, k);
  Eigen::Map<const RowMajor> W(wt, k, s.f);
  Eigen::Map<RowMajor> O(out, m, s.f);
  O.noalias() = P * W;
}

struct Direct {
  int pw, plane, pad, lo, hi;  // padded width, plane stride, slack, flat range of interior rows
  std::vector<float> in, out;
  explicit Direct(const Shape& s) {
    pw = s.w + 2;
    pad = PV * VW + 2 * pw;
    plane = (s.h + 2) * pw + 2 * pad;
    lo = pad + pw;
    hi = pad + (s.h + 1) * pw;
    in.assign(size_t(plane) * s.c, 0.f);
    out.assign(size_t(plane) * s.f, 0.f);
  }
};

static void direct(const Shape& s, const float* in, const float* wt, float* out, Direct& d) {
  int off[9];
  for (int t = 0; t < 9; ++t) off[t] = (t / 3 - 1) * d.pw + (t % 3 - 1);
  for (int n = 0; n < s.n; ++n) {
    const float* img = in + size_t(n) * s.h * s.w * s.c;
    for (int y = 0; y < s.h; ++y)  // NHWC -> zero-bordered channel planes (borders stay 0)
      for (int x = 0; x < s.w; ++x)
        for (int c = 0; c < s.c; ++c)
          d.in[size_t(c) * d.plane + d.pad + (y + 1) * d.pw + x + 1] = img[(y * s.w + x) * s.c + c];
    for (int f0 = 0; f0 < s.f; f0 += FB)
      for (int p = d.lo; p < d.hi; p += PV * VW) {
        vec acc[PV][FB] = {};
        for (int t = 0; t < 9; ++t) {
          const float* src = d.in.data() + p + off[t];
          const float* w = wt + size_t(t) * s.c * s.f + f0;
          for (int c = 0; c < s.c; ++c, src += d.plane, w += s.f) {
            vec x[PV];
            for (int i = 0; i < PV; ++i) x[i] = loadu(src + i * VW);
            for (int j = 0; j < FB; ++j) {
              vec b = vec{} + w[j];
              for (int i = 0; i < PV; ++i) acc[i][j] += x[i] * b;
            }
          }
        }
        for (int j = 0; j < FB; ++j)
          for (int i = 0; i < PV; ++i)
            std::memcpy(&d.out[size_t(f0 + j) * d.plane + p + i * VW], &acc[i][j], sizeof(vec));
      }
    float* o = out + size_t(n) * s.h * s.w * s.f;
    for (int y = 0; y < s.h; ++y)  // channel planes -> NHWC, interior pixels only
      for (int x = 0; x < s.w; ++x)
        for (int f = 0; f < s.f; ++f)
          o[(y * s.w + x) * s.f + f] = d.out[size_t(f) * d.plane + d.pad + (y + 1) * d.pw + x + 1];
  }
}

template <class F>
static double best_seconds(F&& call) {
  call();
  int reps = 1;
  for (;;) {  // grow the repetition count until one round takes >= 50 ms
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) call();
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dt >= 0.05) break;
    reps *= 2;
  }
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) call();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  return best;
}

static double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s N H W C F\n", argv[0]);
    return 2;
  }
  Shape s{std::atoi(argv[1]), std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5])};
  if (s.f % FB) {
    std::fprintf(stderr, "F must be a multiple of %d\n", FB);
    return 2;
  }
  std::mt19937 rng(39);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> in(size_t(s.n) * s.h * s.w * s.c), wt(size_t(9) * s.c * s.f);
  for (auto& v : in) v = u(rng);
  for (auto& v : wt) v = u(rng);
  const size_t outn = size_t(s.n) * s.h * s.w * s.f;
  std::vector<float> ref(outn), oa(outn), ob(outn), pm(size_t(s.n) * s.h * s.w * 9 * s.c);
  Direct d(s);
  naive(s, in.data(), wt.data(), ref.data());
  double ta = best_seconds([&] { patches(s, in.data(), wt.data(), oa.data(), pm); });
  double tb = best_seconds([&] { direct(s, in.data(), wt.data(), ob.data(), d); });
  std::vector<float> oc(outn), buf(direct_buffer_floats<kPV, kFB>(s.c, 3, 3, s.f, s.h, s.w));
  double tc = best_seconds([&] {
    direct_conv<kPV, kFB>(oc.data(), in.data(), wt.data(), s.n, s.h, s.w, s.c, 3, 3, s.f, s.h, s.w, 1, 1, buf.data());
  });
  const double flop = 2.0 * s.n * s.h * s.w * 9.0 * s.c * s.f;
  std::printf(
      "N=%d %dx%d C=%d F=%d vec=%d | patches+GEMM %8.2f us %6.1f GFLOP/s diff %.1e | "
      "direct %8.2f us %6.1f GFLOP/s diff %.1e | block %dx%d %8.2f us %6.1f GFLOP/s diff %.1e | "
      "patches/block %.2f\n",
      s.n, s.h, s.w, s.c, s.f, VW, ta * 1e6, flop / ta * 1e-9, max_diff(oa, ref), tb * 1e6, flop / tb * 1e-9,
      max_diff(ob, ref), kPV, kFB, tc * 1e6, flop / tc * 1e-9, max_diff(oc, ref), ta / tc);
  return 0;
}
