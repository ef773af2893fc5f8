// The single-core floating point peak of one x86-64 level, measured: many
// independent multiply-add chains on vectors of LANES floats, as wide as the
// level's registers (built with -march=<level> -ffp-contract=fast, so v3 and v4
// use FMA). Prints {"gflops": ...}, the best of a few repetitions.
#include <chrono>
#include <cstdio>

#ifndef LANES
#error "LANES (floats per vector register) must be defined by the build"
#endif

typedef float Vec __attribute__((vector_size(LANES * sizeof(float))));

// Not inlined, with the iteration count from outside: the compiler cannot fold the loop away.
__attribute__((noinline)) static Vec chains(long iterations, Vec x, Vec y) {
  constexpr int kChains = 12;  // enough independent multiply-adds to fill two pipelines
  Vec acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = x + static_cast<float>(c);
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 12  // the chains must live in registers, not in memory
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * x + y;
  }
  Vec sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum += acc[c];
  return sum;
}

int main(int argc, char**) {
  const long iterations = 20000000;
  Vec x, y;
  for (int i = 0; i < LANES; ++i) {
    x[i] = 0.999999f + 1e-7f * static_cast<float>(argc + i);
    y[i] = 1e-6f;
  }
  double best = 0;
  float sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    const Vec r = chains(iterations, x, y);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink += r[0];
    const double gflops = 2.0 * LANES * 12 * static_cast<double>(iterations) / seconds / 1e9;
    if (gflops > best) best = gflops;
  }
  std::printf("{\"gflops\": %.4g, \"lanes\": %d, \"check\": %g}\n", best, LANES, static_cast<double>(sink));
  return 0;
}
