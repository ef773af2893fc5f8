#ifndef TFAOT_MODEL_H
#define TFAOT_MODEL_H

/*
 * tfaot-dist C++ interface: tfaot::Model<W>, the entry point for evaluating a
 * model compiled ahead of time by tfaot-dist.
 *
 * Header-only, C++17 or newer, standard library only. This header is enough:
 *
 *   #include "tfaot/Model.h"
 *   #include "tfaot-model-NAME/model.h"
 *
 *   tfaot::Model<tfaot_model::NAME> model;
 *   tfaot::FloatArrays input = {{0, 1, 2, 3}};
 *   tfaot::FloatArrays output;
 *   std::tie(output) = model.run<tfaot::FloatArrays>(1, input);
 *
 * Inside CMSSW (see tfaot/Util.h) this class is tfaot_dist::Model, and a
 * package's model.h serves CMSSW's own tfaot::Model instead.
 *
 * Positional inputs and outputs follow the order of model.inputNames() and
 * model.outputNames() (the package's manifest lists the same order). Check
 * them at run time if in doubt, e.g. model.inputIndex("jet_pt").
 *
 * A Model holds the buffers of the compiled code, so run() is not const and
 * one instance must not be used by two threads at the same time: create one
 * instance per thread / per stream module (it is cheap: the buffers of each
 * compiled batch size are allocated on its first use).
 *
 * Contract with the wrapper class W generated as model.h (version 1):
 *
 *   static constexpr int tfaotContractVersion;   // == TFAOT_WRAPPER_CONTRACT_VERSION
 *   using InputTypes = std::tuple<T...>;         // element type per input, positional
 *   using OutputTypes = std::tuple<T...>;        // element type per output, positional
 *   static const char* name();                   // model (class) name
 *   static const char* package();                // e.g. "tfaot-model-simple"
 *   static std::vector<int> batchSizes();        // compiled batch sizes, ascending
 *   static std::vector<std::string> defaultRules();         // e.g. {"5:2,2,2"}
 *   static std::vector<std::string> inputNames(), outputNames();
 *   static std::vector<std::string> inputDTypes(), outputDTypes();  // "float32", ...
 *   static std::vector<std::vector<std::int64_t>> inputShapes(), outputShapes();  // no batch dim
 *   W();                                         // cheap, no buffers yet; movable
 *   void* argData(int batchSize, std::size_t i); // arg buffer of the compiled batch size
 *   const void* resultData(int batchSize, std::size_t i);  // valid after run(batchSize)
 *   void run(int batchSize);                     // throws std::runtime_error on failure
 *   const char* cpuLevel() const;                // optional: the CPU level it runs (tfaot/CpuLevel.h)
 *
 * argData/resultData/run throw std::invalid_argument for a batch size the model
 * was not compiled for. Buffers are row-major with the batch dimension first,
 * i.e. batchSize * rowSize elements, rowSize being the product of the shape.
 */

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tfaot/Batching.h"
#include "tfaot/Util.h"

namespace tfaot_dist {

namespace detail {

// static checks of run() argument types; the instantiation context of a
// failing assertion names the index I, the given type and the element type
template <std::size_t I, typename Given, typename Element>
struct InputTypeCheck {
  static_assert(std::is_same_v<Given, std::vector<std::vector<Element>>>,
                "tfaot::Model::run: input I has the wrong type; pass the tfaot::*Arrays type "
                "(std::vector<std::vector<Element>>) matching the model's input dtype");
  static constexpr bool value = true;
};

template <std::size_t I, typename Given, typename Element>
struct OutputTypeCheck {
  static_assert(std::is_same_v<Given, std::vector<std::vector<Element>>>,
                "tfaot::Model::run: output I has the wrong type; request the tfaot::*Arrays type "
                "(std::vector<std::vector<Element>>) matching the model's output dtype");
  static constexpr bool value = true;
};

template <typename Given, typename Expected, std::size_t... I>
constexpr bool checkInputTypes(std::index_sequence<I...>) {
  return (InputTypeCheck<I, std::tuple_element_t<I, Given>, std::tuple_element_t<I, Expected>>::value && ...);
}

template <typename Given, typename Expected, std::size_t... I>
constexpr bool checkOutputTypes(std::index_sequence<I...>) {
  return (OutputTypeCheck<I, std::tuple_element_t<I, Given>, std::tuple_element_t<I, Expected>>::value && ...);
}

}  // namespace detail

template <class W>
class Model {
  static_assert(W::tfaotContractVersion == TFAOT_WRAPPER_CONTRACT_VERSION,
                "tfaot::Model: the model package (model.h) was generated for another version of the tfaot "
                "interface headers; use the tfaot runtime that the package was built with");

 public:
  using Wrapper = W;
  using InputTypes = typename W::InputTypes;
  using OutputTypes = typename W::OutputTypes;
  static constexpr std::size_t numInputs = std::tuple_size_v<InputTypes>;
  static constexpr std::size_t numOutputs = std::tuple_size_v<OutputTypes>;

  // creates the model and registers the package's default batch rules; no
  // buffers are allocated until a batch size is first evaluated
  Model() : name_(W::name()), package_(W::package()) {
    describe(inputs_, W::inputNames(), W::inputDTypes(), W::inputShapes(), numInputs, "input",
             static_cast<InputTypes*>(nullptr));
    describe(outputs_, W::outputNames(), W::outputDTypes(), W::outputShapes(), numOutputs, "output",
             static_cast<OutputTypes*>(nullptr));
    for (const TensorInfo& t : inputs_) {
      inputNames_.push_back(t.name);
    }
    for (const TensorInfo& t : outputs_) {
      outputNames_.push_back(t.name);
    }
    for (int bs : W::batchSizes()) {
      if (bs <= 0) {
        throw std::logic_error("tfaot: model '" + name_ + "' declares an invalid compiled batch size " +
                               std::to_string(bs));
      }
      batchSizes_.push_back(static_cast<std::size_t>(bs));
    }
    std::sort(batchSizes_.begin(), batchSizes_.end());
    batchSizes_.erase(std::unique(batchSizes_.begin(), batchSizes_.end()), batchSizes_.end());
    if (batchSizes_.empty()) {
      throw std::logic_error("tfaot: model '" + name_ + "' declares no compiled batch sizes");
    }
    for (const std::string& rule : W::defaultRules()) {
      try {
        setBatchRule(rule);
      } catch (const std::exception& e) {
        throw std::logic_error("tfaot: default batch rule '" + rule + "' of model '" + name_ +
                               "' is invalid: " + e.what());
      }
    }
  }

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  Model(Model&&) = default;
  Model& operator=(Model&&) = default;
  ~Model() = default;

  // ---- description ----

  // model name, e.g. "simple", and package name, e.g. "tfaot-model-simple"
  const std::string& name() const { return name_; }
  const std::string& package() const { return package_; }

  // compiled batch sizes, ascending
  const std::vector<std::size_t>& batchSizes() const { return batchSizes_; }

  // the x86-64 level whose code this model runs, e.g. "x86-64-v3" (see tfaot/CpuLevel.h);
  // packages of tfaot-dist before multi-level packages have no such function
  template <typename X = W>
  auto cpuLevel() const -> decltype(std::declval<const X&>().cpuLevel()) {
    return wrapper_.cpuLevel();
  }
  bool hasBatchSize(std::size_t batchSize) const {
    return std::find(batchSizes_.begin(), batchSizes_.end(), batchSize) != batchSizes_.end();
  }

  // inputs and outputs in positional order (the order of run() arguments and results)
  std::size_t nInputs() const { return numInputs; }
  std::size_t nOutputs() const { return numOutputs; }
  const std::vector<TensorInfo>& inputs() const { return inputs_; }
  const std::vector<TensorInfo>& outputs() const { return outputs_; }
  const TensorInfo& input(std::size_t i) const { return at(inputs_, i, "input"); }
  const TensorInfo& output(std::size_t i) const { return at(outputs_, i, "output"); }
  const std::vector<std::string>& inputNames() const { return inputNames_; }
  const std::vector<std::string>& outputNames() const { return outputNames_; }
  std::vector<DType> inputDTypes() const { return dtypes(inputs_); }
  std::vector<DType> outputDTypes() const { return dtypes(outputs_); }
  std::vector<std::vector<std::int64_t>> inputShapes() const { return shapes(inputs_); }
  std::vector<std::vector<std::int64_t>> outputShapes() const { return shapes(outputs_); }

  // positional index of an input / output by name; throws std::invalid_argument if unknown
  std::size_t inputIndex(const std::string& name) const { return indexOf(inputNames_, name, "input"); }
  std::size_t outputIndex(const std::string& name) const { return indexOf(outputNames_, name, "output"); }

  // one-line summary for logs, e.g.
  // "simple (tfaot-model-simple): batch sizes 1,2,4; inputs input_0: float32[4]; outputs ..."
  std::string summary() const {
    std::string s = name_ + " (" + package_ + "): batch sizes " + detail::join(batchSizes_) + "; inputs ";
    for (std::size_t i = 0; i < inputs_.size(); i++) {
      s += (i == 0 ? "" : ", ") + inputs_[i].toString();
    }
    s += "; outputs ";
    for (std::size_t i = 0; i < outputs_.size(); i++) {
      s += (i == 0 ? "" : ", ") + outputs_[i].toString();
    }
    const std::string rules = strategy_.toString();
    return s + "; batch rules " + (rules.empty() ? "none" : rules);
  }

  // ---- batching ----

  const BatchStrategy& getBatchStrategy() const { return strategy_; }

  // replaces the whole strategy; throws std::invalid_argument if a rule uses
  // a batch size the model was not compiled for (the strategy is then unchanged)
  void setBatchStrategy(const BatchStrategy& strategy) {
    for (std::size_t target : strategy.targets()) {
      checkRule(strategy.getRule(target));
    }
    strategy_ = strategy;
  }

  // registers a rule (replacing an existing rule of the same target); throws
  // std::invalid_argument for invalid rules and for rules that use a batch
  // size the model was not compiled for
  void setBatchRule(const BatchRule& rule) {
    checkRule(rule);
    strategy_.setRule(rule);
  }
  void setBatchRule(std::size_t batchSize, const std::vector<std::size_t>& sizes, std::size_t lastPadding = 0) {
    setBatchRule(BatchRule(batchSize, sizes, lastPadding));
  }
  void setBatchRule(const std::string& rule) { setBatchRule(BatchRule(rule)); }

  // the rule used for a target batch size; creates and registers the default
  // rule (see BatchStrategy::makeDefaultRule) if there is none yet
  const BatchRule& ensureRule(std::size_t batchSize) {
    if (!strategy_.hasRule(batchSize)) {
      return strategy_.setDefaultRule(batchSize, batchSizes_);
    }
    return strategy_.getRule(batchSize);
  }

  // ---- evaluation ----

  /*
   * Evaluates batchSize rows. Inputs are tfaot::*Arrays in positional order,
   * each with batchSize rows of input(i).rowSize elements; the template
   * arguments are the tfaot::*Arrays types of all outputs, in positional order:
   *
   *   std::tie(out0, out1) = model.run<tfaot::FloatArrays, tfaot::BoolArrays>(n, in0, in1);
   *
   * Wrong output count or types and wrong input types fail to compile. A wrong
   * number of inputs, a negative batch size, or inputs whose outer size is not
   * batchSize or whose rows do not have rowSize elements throw
   * std::invalid_argument before anything is evaluated. A failing evaluation
   * throws std::runtime_error. batchSize 0 returns empty outputs without
   * evaluating anything.
   */
  template <typename... Outputs, typename... Inputs>
  std::tuple<Outputs...> run(int batchSize, const Inputs&... inputs) {
    static_assert(sizeof...(Outputs) == numOutputs,
                  "tfaot::Model::run: the number of template arguments (output types) must equal the number "
                  "of model outputs");
    static_assert(detail::checkOutputTypes<std::tuple<Outputs...>, OutputTypes>(std::index_sequence_for<Outputs...>{}),
                  "tfaot::Model::run: output type mismatch");
    if constexpr (sizeof...(Inputs) != numInputs) {
      (void)batchSize;
      ((void)inputs, ...);
      throw std::invalid_argument("tfaot: model '" + name_ + "' received " + std::to_string(sizeof...(Inputs)) +
                                  " inputs, but it has " + std::to_string(numInputs) + " (" +
                                  detail::join(inputNames_, ", ") + ")");
    } else {
      static_assert(detail::checkInputTypes<std::tuple<Inputs...>, InputTypes>(std::index_sequence_for<Inputs...>{}),
                    "tfaot::Model::run: input type mismatch");
      checkBatchSize(batchSize);
      const auto in = std::forward_as_tuple(inputs...);
      const std::size_t rows = static_cast<std::size_t>(batchSize);

      // validate all inputs before evaluating anything
      detail::forEachIndex<numInputs>([&](auto I) {
        constexpr std::size_t i = decltype(I)::value;
        checkNested(i, std::get<i>(in), rows);
      });

      // allocate outputs
      std::tuple<Outputs...> out;
      detail::forEachIndex<numOutputs>([&](auto K) {
        constexpr std::size_t k = decltype(K)::value;
        using T = std::tuple_element_t<k, OutputTypes>;
        std::get<k>(out).assign(rows, std::vector<T>(outputs_[k].rowSize));
      });
      if (rows == 0) {
        return out;
      }

      runBatched(
          batchSize,
          [&](int bs, std::size_t offset, std::size_t n) {
            detail::forEachIndex<numInputs>([&](auto I) {
              constexpr std::size_t i = decltype(I)::value;
              using T = std::tuple_element_t<i, InputTypes>;
              const auto& src = std::get<i>(in);
              const std::size_t rs = inputs_[i].rowSize;
              T* dst = static_cast<T*>(wrapper_.argData(bs, i));
              for (std::size_t r = 0; r < n; r++) {
                std::copy(src[offset + r].begin(), src[offset + r].end(), dst + r * rs);
              }
              std::fill(dst + n * rs, dst + static_cast<std::size_t>(bs) * rs, T());
            });
          },
          [&](int bs, std::size_t offset, std::size_t n) {
            detail::forEachIndex<numOutputs>([&](auto K) {
              constexpr std::size_t k = decltype(K)::value;
              using T = std::tuple_element_t<k, OutputTypes>;
              auto& dst = std::get<k>(out);
              const std::size_t rs = outputs_[k].rowSize;
              const T* src = static_cast<const T*>(wrapper_.resultData(bs, k));
              for (std::size_t r = 0; r < n; r++) {
                std::copy(src + r * rs, src + (r + 1) * rs, dst[offset + r].begin());
              }
            });
          });
      return out;
    }
  }

  /*
   * Fast path for callers holding contiguous, row-major buffers (batch
   * dimension first): inputs[i] must view exactly batchSize * input(i).rowSize
   * elements of input(i)'s dtype, outputs[k] exactly batchSize *
   * output(k).rowSize elements of output(k)'s dtype, both in positional order:
   *
   *   std::vector<float> x(n * 4), y(n * 2);   // filled by the caller
   *   model.runFlat(n, {x}, {y});
   *   model.runFlat(n, {tfaot::InputSpan(xPtr, n * 4)}, {tfaot::OutputSpan(yPtr, n * 2)});
   *
   * The same batch rules apply as for run(). Per composite evaluation each
   * input is copied with one memcpy into the compiled code's argument buffer
   * (padding rows are zeroed) and each result is copied with one memcpy
   * straight into the caller's output buffer: no allocation, no per-row
   * loops. Counts, dtypes and the numbers of inputs and outputs are checked
   * before anything is evaluated (std::invalid_argument). Input and output
   * buffers must not overlap. batchSize 0 does nothing.
   */
  void runFlat(int batchSize, std::initializer_list<InputSpan> inputs, std::initializer_list<OutputSpan> outputs) {
    runFlat(batchSize, inputs.begin(), inputs.size(), outputs.begin(), outputs.size());
  }

  void runFlat(int batchSize, const InputSpan* inputs, std::size_t nInputSpans, const OutputSpan* outputs,
               std::size_t nOutputSpans) {
    if (nInputSpans != numInputs) {
      throw std::invalid_argument("tfaot: model '" + name_ + "' received " + std::to_string(nInputSpans) +
                                  " input buffers, but it has " + std::to_string(numInputs) + " inputs (" +
                                  detail::join(inputNames_, ", ") + ")");
    }
    if (nOutputSpans != numOutputs) {
      throw std::invalid_argument("tfaot: model '" + name_ + "' received " + std::to_string(nOutputSpans) +
                                  " output buffers, but it has " + std::to_string(numOutputs) + " outputs (" +
                                  detail::join(outputNames_, ", ") + ")");
    }
    checkBatchSize(batchSize);
    const std::size_t rows = static_cast<std::size_t>(batchSize);
    for (std::size_t i = 0; i < numInputs; i++) {
      checkSpan(inputs_[i], "input", i, inputs[i].dtype(), inputs[i].count(), inputs[i].data() != nullptr, rows);
    }
    for (std::size_t k = 0; k < numOutputs; k++) {
      checkSpan(outputs_[k], "output", k, outputs[k].dtype(), outputs[k].count(), outputs[k].data() != nullptr, rows);
    }
    if (rows == 0) {
      return;
    }

    runBatched(
        batchSize,
        [&](int bs, std::size_t offset, std::size_t n) {
          for (std::size_t i = 0; i < numInputs; i++) {
            const std::size_t rowBytes = inputs_[i].rowSize * dtypeSize(inputs_[i].dtype);
            char* dst = static_cast<char*>(wrapper_.argData(bs, i));
            if (n * rowBytes > 0) {
              std::memcpy(dst, static_cast<const char*>(inputs[i].data()) + offset * rowBytes, n * rowBytes);
            }
            const std::size_t padBytes = (static_cast<std::size_t>(bs) - n) * rowBytes;
            if (padBytes > 0) {
              std::memset(dst + n * rowBytes, 0, padBytes);
            }
          }
        },
        [&](int bs, std::size_t offset, std::size_t n) {
          for (std::size_t k = 0; k < numOutputs; k++) {
            const std::size_t rowBytes = outputs_[k].rowSize * dtypeSize(outputs_[k].dtype);
            if (n * rowBytes > 0) {
              std::memcpy(static_cast<char*>(outputs[k].data()) + offset * rowBytes, wrapper_.resultData(bs, k),
                          n * rowBytes);
            }
          }
        });
  }

 private:
  W wrapper_;
  std::string name_;
  std::string package_;
  std::vector<std::size_t> batchSizes_;
  std::vector<TensorInfo> inputs_;
  std::vector<TensorInfo> outputs_;
  std::vector<std::string> inputNames_;
  std::vector<std::string> outputNames_;
  BatchStrategy strategy_;

  // evaluates the rule of batchSize: for each composite size bs, fill(bs,
  // offset, n) writes rows [offset, offset + n) of all inputs into the arg
  // buffers of bs and zeroes the remaining bs - n rows, then bs is run and
  // read(bs, offset, n) copies n result rows to rows [offset, offset + n)
  template <typename Fill, typename Read>
  void runBatched(int batchSize, Fill&& fill, Read&& read) {
    const BatchRule& rule = ensureRule(static_cast<std::size_t>(batchSize));
    const std::vector<std::size_t>& sizes = rule.getSizes();
    std::size_t offset = 0;
    for (std::size_t c = 0; c < sizes.size(); c++) {
      const int bs = static_cast<int>(sizes[c]);
      const std::size_t n = sizes[c] - (c + 1 == sizes.size() ? rule.getLastPadding() : 0);
      fill(bs, offset, n);
      wrapper_.run(bs);
      read(bs, offset, n);
      offset += n;
    }
  }

  void checkBatchSize(int batchSize) const {
    if (batchSize < 0) {
      throw std::invalid_argument("tfaot: model '" + name_ + "' cannot be run with a negative batch size (" +
                                  std::to_string(batchSize) + ")");
    }
  }

  void checkRule(const BatchRule& rule) const {
    for (std::size_t s : rule.getSizes()) {
      if (!hasBatchSize(s)) {
        throw std::invalid_argument("tfaot: batch rule '" + rule.toString() + "' uses batch size " + std::to_string(s) +
                                    ", but model '" + name_ + "' was compiled for batch sizes " +
                                    detail::join(batchSizes_) + " only");
      }
    }
  }

  template <typename T>
  void checkNested(std::size_t i, const std::vector<std::vector<T>>& data, std::size_t rows) const {
    const TensorInfo& t = inputs_[i];
    if (data.size() != rows) {
      throw std::invalid_argument("tfaot: input " + std::to_string(i) + " ('" + t.name + "') of model '" + name_ +
                                  "' has " + std::to_string(data.size()) + " rows, but the batch size is " +
                                  std::to_string(rows));
    }
    for (std::size_t r = 0; r < rows; r++) {
      if (data[r].size() != t.rowSize) {
        throw std::invalid_argument("tfaot: input " + std::to_string(i) + " ('" + t.name + "') of model '" + name_ +
                                    "': row " + std::to_string(r) + " has " + std::to_string(data[r].size()) +
                                    " elements, but " + t.toString() + " needs " + std::to_string(t.rowSize) +
                                    " per row");
      }
    }
  }

  void checkSpan(const TensorInfo& t, const char* kind, std::size_t i, DType dtype, std::size_t count, bool hasData,
                 std::size_t rows) const {
    const std::string what =
        std::string("tfaot: ") + kind + " " + std::to_string(i) + " ('" + t.name + "') of model '" + name_ + "': ";
    if (dtype != t.dtype) {
      throw std::invalid_argument(what + "got a " + dtypeName(dtype) + " buffer, but " + t.toString() + " needs " +
                                  dtypeName(t.dtype));
    }
    if (count != rows * t.rowSize) {
      throw std::invalid_argument(what + "got " + std::to_string(count) + " elements, but batch size " +
                                  std::to_string(rows) + " of " + t.toString() + " needs " +
                                  std::to_string(rows * t.rowSize));
    }
    if (!hasData && count > 0) {
      throw std::invalid_argument(what + "got a null buffer");
    }
  }

  template <typename... T>
  void describe(std::vector<TensorInfo>& infos, const std::vector<std::string>& names,
                const std::vector<std::string>& dtypeNames, const std::vector<std::vector<std::int64_t>>& shapes,
                std::size_t n, const char* kind, std::tuple<T...>*) {
    const std::vector<DType> expected = {DTypeOf<T>::value...};
    if (names.size() != n || dtypeNames.size() != n || shapes.size() != n) {
      throw std::logic_error("tfaot: model '" + name_ + "' describes an inconsistent number of " + kind + "s");
    }
    for (std::size_t i = 0; i < n; i++) {
      TensorInfo t;
      t.name = names[i];
      if (!parseDType(dtypeNames[i], t.dtype) || t.dtype != expected[i]) {
        throw std::logic_error("tfaot: model '" + name_ + "': " + kind + " '" + names[i] + "' declares dtype '" +
                               dtypeNames[i] + "', inconsistent with its C++ type " + dtypeName(expected[i]));
      }
      t.shape = shapes[i];
      t.rowSize = 1;
      for (std::int64_t d : t.shape) {
        if (d < 0) {
          throw std::logic_error("tfaot: model '" + name_ + "': " + kind + " '" + names[i] +
                                 "' has a dynamic or negative dimension");
        }
        t.rowSize *= static_cast<std::size_t>(d);
      }
      infos.push_back(std::move(t));
    }
  }

  static std::vector<DType> dtypes(const std::vector<TensorInfo>& infos) {
    std::vector<DType> result;
    for (const TensorInfo& t : infos) {
      result.push_back(t.dtype);
    }
    return result;
  }

  static std::vector<std::vector<std::int64_t>> shapes(const std::vector<TensorInfo>& infos) {
    std::vector<std::vector<std::int64_t>> result;
    for (const TensorInfo& t : infos) {
      result.push_back(t.shape);
    }
    return result;
  }

  const TensorInfo& at(const std::vector<TensorInfo>& infos, std::size_t i, const char* kind) const {
    if (i >= infos.size()) {
      throw std::out_of_range("tfaot: model '" + name_ + "' has " + std::to_string(infos.size()) + " " + kind +
                              "s, index " + std::to_string(i) + " is out of range");
    }
    return infos[i];
  }

  std::size_t indexOf(const std::vector<std::string>& names, const std::string& name, const char* kind) const {
    for (std::size_t i = 0; i < names.size(); i++) {
      if (names[i] == name) {
        return i;
      }
    }
    throw std::invalid_argument("tfaot: model '" + name_ + "' has no " + kind + " named '" + name + "' (its " + kind +
                                "s: " + detail::join(names, ", ") + ")");
  }
};

}  // namespace tfaot_dist

#if !TFAOT_DIST_CMSSW_INTERFACE
namespace tfaot {
using namespace tfaot_dist;
}  // namespace tfaot
#endif

#endif  // TFAOT_MODEL_H
