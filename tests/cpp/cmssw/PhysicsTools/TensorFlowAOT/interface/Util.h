// Test double of CMSSW's PhysicsTools/TensorFlowAOT/interface/Util.h for
// tfaot-dist's tests. The declarations follow CMSSW's contract (names and
// types are facts of that interface); the code is ours.
#ifndef TFAOT_TEST_DOUBLE_TENSORFLOWAOT_UTIL_H
#define TFAOT_TEST_DOUBLE_TENSORFLOWAOT_UTIL_H

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

// As in CMSSW, TensorFlow's headers come first (the runtime's include
// directory must be a system one for a warning-free build).
#include "tensorflow/compiler/tf2xla/xla_compiled_cpu_function.h"
#include "tensorflow/core/platform/types.h"

namespace tfaot {

using AllocMode = tensorflow::XlaCompiledCpuFunction::AllocMode;
using BoolArrays = std::vector<std::vector<bool>>;
using Int32Arrays = std::vector<std::vector<int32_t>>;
using Int64Arrays = std::vector<std::vector<int64_t>>;
using FloatArrays = std::vector<std::vector<float>>;
using DoubleArrays = std::vector<std::vector<double>>;

// a callable that calls f(std::integral_constant<size_t, I>{}) for I in [0, N)
template <size_t N>
auto createIndexLooper() {
  return [](auto&& f) {
    [&]<size_t... I>(std::index_sequence<I...>) {
      (f(std::integral_constant<size_t, I>{}), ...);
    }(std::make_index_sequence<N>{});
  };
}

}  // namespace tfaot

#endif
