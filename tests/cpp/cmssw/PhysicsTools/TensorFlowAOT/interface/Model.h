// Test double of CMSSW's PhysicsTools/TensorFlowAOT/interface/Model.h for
// tfaot-dist's tests. It uses a wrapper W exactly through the members CMSSW's
// tfaot::Model<W> uses (facts of the contract): W() default-constructed,
// name(), batchSizes(), nArgs(), nResults(), argCountNoBatch(i),
// resultCountNoBatch(k), the member templates argData<T>(bs, i) and
// resultData<T>(bs, k), and run(bs). Batch rules as CMSSW's BatchStrategy.
// Our code.
#ifndef TFAOT_TEST_DOUBLE_TENSORFLOWAOT_MODEL_H
#define TFAOT_TEST_DOUBLE_TENSORFLOWAOT_MODEL_H

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "FWCore/Utilities/interface/Exception.h"
#include "PhysicsTools/TensorFlowAOT/interface/Batching.h"
#include "PhysicsTools/TensorFlowAOT/interface/Util.h"

namespace tfaot {

template <class W>
class Model {
 public:
  explicit Model() : wrapper_(std::make_unique<W>()) {}

  const std::string& name() const { return wrapper_->name(); }
  void setBatchStrategy(const BatchStrategy& strategy) { strategy_ = strategy; }
  const BatchStrategy& getBatchStrategy() const { return strategy_; }
  void setBatchRule(size_t batchSize, const std::vector<size_t>& sizes, size_t lastPadding = 0) {
    strategy_.setRule(BatchRule(batchSize, sizes, lastPadding));
  }
  void setBatchRule(const std::string& rule) { strategy_.setRule(BatchRule(rule)); }

  template <typename... Outputs, typename... Inputs>
  std::tuple<Outputs...> run(size_t batchSize, Inputs&&... inputs) {
    if (sizeof...(Inputs) != wrapper_->nArgs()) {
      throw cms::Exception("InputMismatch") << name() << ": " << sizeof...(Inputs) << " inputs given";
    }
    if (sizeof...(Outputs) != wrapper_->nResults()) {
      throw cms::Exception("OutputMismatch") << name() << ": " << sizeof...(Outputs) << " outputs requested";
    }
    if (!strategy_.hasRule(batchSize)) {
      strategy_.setDefaultRule(batchSize, wrapper_->batchSizes());
    }
    const BatchRule& rule = strategy_.getRule(batchSize);
    auto eachOutput = createIndexLooper<sizeof...(Outputs)>();

    std::tuple<Outputs...> outputs;
    eachOutput([&](auto k) {
      using Row = typename std::tuple_element_t<k, std::tuple<Outputs...>>::value_type;
      std::get<k>(outputs).assign(batchSize, Row(wrapper_->resultCountNoBatch(k)));
    });

    size_t offset = 0;
    for (size_t c = 0; c < rule.nSizes(); c++) {
      const size_t bs = rule.getSize(c);
      const size_t rows = bs - (c + 1 == rule.nSizes() ? rule.getLastPadding() : 0);
      size_t argIndex = 0;
      (fill(bs, rows, offset, argIndex++, inputs), ...);
      wrapper_->run(bs);
      eachOutput([&](auto k) { read(bs, rows, offset, k, std::get<k>(outputs)); });
      offset += rows;
    }
    return outputs;
  }

 private:
  std::unique_ptr<W> wrapper_;
  BatchStrategy strategy_;

  template <typename T>
  void fill(size_t bs, size_t rows, size_t offset, size_t argIndex, const std::vector<std::vector<T>>& input) {
    const size_t count = static_cast<size_t>(wrapper_->argCountNoBatch(argIndex));
    T* buffer = wrapper_->template argData<T>(bs, argIndex);
    for (size_t r = 0; r < rows; r++) {
      if (input[offset + r].size() != count) {
        throw cms::Exception("InputMismatch") << name() << ": row of " << input[offset + r].size() << " values";
      }
      std::copy(input[offset + r].begin(), input[offset + r].end(), buffer + r * count);
    }
  }

  template <typename T>
  void read(size_t bs, size_t rows, size_t offset, size_t resultIndex, std::vector<std::vector<T>>& output) const {
    const size_t count = static_cast<size_t>(wrapper_->resultCountNoBatch(resultIndex));
    const T* buffer = wrapper_->template resultData<T>(bs, resultIndex);
    for (size_t r = 0; r < rows; r++) {
      output[offset + r].assign(buffer + r * count, buffer + (r + 1) * count);
    }
  }
};

}  // namespace tfaot

#endif
