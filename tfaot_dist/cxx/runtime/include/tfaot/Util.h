#ifndef TFAOT_UTIL_H
#define TFAOT_UTIL_H

/*
 * tfaot-dist C++ interface: array types, data types, tensor descriptions and
 * non-owning buffer views used by tfaot::Model<W>.
 *
 * Header-only, C++17 or newer, standard library only. Include "tfaot/Model.h"
 * to get the whole interface.
 *
 * Namespaces: the interface lives in tfaot_dist::. Outside CMSSW it is also
 * reachable as tfaot:: (a using-directive). Inside CMSSW, tfaot:: is CMSSW's
 * own interface (PhysicsTools/TensorFlowAOT), which the generated model.h then
 * serves instead (see model.h); ours gives way so that both can be seen in one
 * translation unit without redefinitions. TFAOT_DIST_CMSSW_INTERFACE says which
 * case applies: define it to 1 or 0 before including any tfaot header, or leave
 * it to the default, 1 when "PhysicsTools/TensorFlowAOT/interface/Wrapper.h" is
 * on the include path.
 */

#include <array>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// Version of the C++ contract between a generated model.h (the wrapper class W)
// and tfaot::Model<W>. A generated wrapper declares the version it was rendered
// for; Model<W> refuses (at compile time) wrappers of another version.
#define TFAOT_WRAPPER_CONTRACT_VERSION 1

#ifndef TFAOT_DIST_CMSSW_INTERFACE
#if defined(__has_include)
#if __has_include("PhysicsTools/TensorFlowAOT/interface/Wrapper.h")
#define TFAOT_DIST_CMSSW_INTERFACE 1
#endif
#endif
#endif
#ifndef TFAOT_DIST_CMSSW_INTERFACE
#define TFAOT_DIST_CMSSW_INTERFACE 0
#endif

namespace tfaot_dist {

inline constexpr int wrapperContractVersion = TFAOT_WRAPPER_CONTRACT_VERSION;

// nested arrays: outer index = batch row, inner index = flattened (row-major)
// element of that row
using BoolArrays = std::vector<std::vector<bool>>;
using Int32Arrays = std::vector<std::vector<std::int32_t>>;
using Int64Arrays = std::vector<std::vector<std::int64_t>>;
using FloatArrays = std::vector<std::vector<float>>;
using DoubleArrays = std::vector<std::vector<double>>;

// element types of model inputs and outputs
enum class DType { Bool, Int32, Int64, Float, Double };

// TensorFlow's name of a data type ("bool", "int32", "int64", "float32", "float64")
inline const char* dtypeName(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return "bool";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::Float:
      return "float32";
    case DType::Double:
      return "float64";
  }
  return "unknown";
}

// size in bytes of one element (bool is one byte, as XLA's pred type)
inline std::size_t dtypeSize(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return sizeof(bool);
    case DType::Int32:
      return sizeof(std::int32_t);
    case DType::Int64:
      return sizeof(std::int64_t);
    case DType::Float:
      return sizeof(float);
    case DType::Double:
      return sizeof(double);
  }
  return 0;
}

// parses a TensorFlow dtype name, returns false when unknown
inline bool parseDType(const std::string& name, DType& dtype) {
  for (DType d : {DType::Bool, DType::Int32, DType::Int64, DType::Float, DType::Double}) {
    if (name == dtypeName(d)) {
      dtype = d;
      return true;
    }
  }
  return false;
}

// maps a C++ element type to its DType; only the five supported types are defined
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<bool> : std::integral_constant<DType, DType::Bool> {};
template <>
struct DTypeOf<std::int32_t> : std::integral_constant<DType, DType::Int32> {};
template <>
struct DTypeOf<std::int64_t> : std::integral_constant<DType, DType::Int64> {};
template <>
struct DTypeOf<float> : std::integral_constant<DType, DType::Float> {};
template <>
struct DTypeOf<double> : std::integral_constant<DType, DType::Double> {};

template <typename T, typename = void>
struct IsElementType : std::false_type {};
template <typename T>
struct IsElementType<T, std::void_t<decltype(DTypeOf<T>::value)>> : std::true_type {};

// true for std::vector<std::vector<T>> with a supported element type T
template <typename A>
struct IsNestedArray : std::false_type {};
template <typename T>
struct IsNestedArray<std::vector<std::vector<T>>> : IsElementType<T> {
  using element_type = T;
};

// description of one model input or output; the shape excludes the batch dimension
struct TensorInfo {
  std::string name;
  DType dtype = DType::Float;
  std::vector<std::int64_t> shape;
  std::size_t rowSize = 1;  // number of elements per batch row (product of shape)

  // e.g. "input_0: float32[4]"
  std::string toString() const {
    std::ostringstream out;
    out << name << ": " << dtypeName(dtype) << "[";
    for (std::size_t i = 0; i < shape.size(); i++) {
      out << (i == 0 ? "" : ",") << shape[i];
    }
    out << "]";
    return out.str();
  }
};

/*
 * Non-owning views of contiguous, row-major buffers for Model<W>::runFlat().
 *
 * A span holds a pointer, an element count and the DType deduced from the
 * pointer's type at construction, so runFlat() can check at run time that a
 * float buffer is not handed to an int64 input. Construct them from a typed
 * pointer and count, a std::vector<T> (not std::vector<bool>, which has no
 * contiguous storage: use a bool array, e.g. std::unique_ptr<bool[]>) or a
 * std::array<T, N>. Spans never own or copy memory; the buffer must outlive
 * the runFlat() call.
 */
class InputSpan {
 public:
  template <typename T, typename = std::enable_if_t<IsElementType<T>::value>>
  InputSpan(const T* data, std::size_t count) : data_(data), count_(count), dtype_(DTypeOf<T>::value) {}

  template <typename T, typename = std::enable_if_t<IsElementType<T>::value && !std::is_same_v<T, bool>>>
  InputSpan(const std::vector<T>& v) : InputSpan(v.data(), v.size()) {}

  template <typename T, std::size_t N, typename = std::enable_if_t<IsElementType<T>::value>>
  InputSpan(const std::array<T, N>& a) : InputSpan(a.data(), N) {}

  // std::vector<bool> has no contiguous storage: use a bool array and InputSpan(ptr, count)
  InputSpan(const std::vector<bool>&) = delete;

  const void* data() const { return data_; }
  std::size_t count() const { return count_; }
  DType dtype() const { return dtype_; }

 private:
  const void* data_;
  std::size_t count_;
  DType dtype_;
};

class OutputSpan {
 public:
  template <typename T, typename = std::enable_if_t<IsElementType<T>::value>>
  OutputSpan(T* data, std::size_t count) : data_(data), count_(count), dtype_(DTypeOf<T>::value) {}

  template <typename T, typename = std::enable_if_t<IsElementType<T>::value && !std::is_same_v<T, bool>>>
  OutputSpan(std::vector<T>& v) : OutputSpan(v.data(), v.size()) {}

  template <typename T, std::size_t N, typename = std::enable_if_t<IsElementType<T>::value>>
  OutputSpan(std::array<T, N>& a) : OutputSpan(a.data(), N) {}

  // std::vector<bool> has no contiguous storage: use a bool array and OutputSpan(ptr, count)
  OutputSpan(std::vector<bool>&) = delete;

  void* data() const { return data_; }
  std::size_t count() const { return count_; }
  DType dtype() const { return dtype_; }

 private:
  void* data_;
  std::size_t count_;
  DType dtype_;
};

namespace detail {

// joins values with a separator, e.g. "1,2,4"
template <typename Container>
std::string join(const Container& values, const char* sep = ",") {
  std::ostringstream out;
  bool first = true;
  for (const auto& v : values) {
    out << (first ? "" : sep) << v;
    first = false;
  }
  return out.str();
}

// calls f(std::integral_constant<std::size_t, I>{}) for I = 0 .. N-1
template <typename F, std::size_t... I>
void forEachIndexImpl(F&& f, std::index_sequence<I...>) {
  (f(std::integral_constant<std::size_t, I>{}), ...);
}
template <std::size_t N, typename F>
void forEachIndex(F&& f) {
  forEachIndexImpl(std::forward<F>(f), std::make_index_sequence<N>{});
}

// What the generated model.h checks when it creates a compiled class: its buffers against what
// model.h declares, which catches headers and objects of different models or versions mixed in one
// package. Only what every TensorFlow from 2.12 on offers is used: the base class's LookupArgIndex
// and LookupResultIndex, the generated argN_size()/resultN_size() (2.12 has no GetArgName or
// result_size(i)); kNoNames stands for the index of a class compiled without names.
inline constexpr int kNoNames = -2;

inline void checkBuffer(const std::string& model, const char* kind, std::size_t index, const char* declaredName,
                        const char* expectedCompiledName, int compiledIndex, std::size_t compiledBytes,
                        std::size_t declaredBytes, std::size_t batchSize) {
  const std::string where = "tfaot: model '" + model + "', batch size " + std::to_string(batchSize) + ", " + kind +
                            " " + std::to_string(index) + " ('" + declaredName + "'): ";
  if (compiledIndex != kNoNames && compiledIndex != static_cast<int>(index)) {
    throw std::logic_error(where + "the compiled code has '" + expectedCompiledName + "' at position " +
                           std::to_string(compiledIndex) + "; the package is inconsistent");
  }
  if (compiledBytes != declaredBytes) {
    throw std::logic_error(where + "the compiled buffer has " + std::to_string(compiledBytes) +
                           " bytes, but model.h declares " + std::to_string(declaredBytes) +
                           "; the package is inconsistent");
  }
}

}  // namespace detail

}  // namespace tfaot_dist

// Outside CMSSW the interface is also reachable as tfaot::... (tfaot::Model,
// tfaot::FloatArrays, ...). Inside CMSSW that namespace belongs to CMSSW's own
// PhysicsTools/TensorFlowAOT interface: ours gives way and stays tfaot_dist::.
#if !TFAOT_DIST_CMSSW_INTERFACE
namespace tfaot {
using namespace tfaot_dist;
}  // namespace tfaot
#endif

#endif  // TFAOT_UTIL_H
