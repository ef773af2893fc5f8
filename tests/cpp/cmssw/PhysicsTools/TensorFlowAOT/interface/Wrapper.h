// Test double of CMSSW's PhysicsTools/TensorFlowAOT/interface/Wrapper.h for
// tfaot-dist's tests. The class shape is CMSSW's contract, taken as facts:
// an abstract tfaot::Wrapper constructed from a name, with pure virtuals for
// the batch sizes, argument and result counts and runSilent(size_t), name()
// returning const std::string&, member templates argData<T>/resultData<T>
// that a generated wrapper provides (hiding these declarations), and
// non-virtual helpers defined in a library (../src/Wrapper.cc). Our code.
#ifndef TFAOT_TEST_DOUBLE_TENSORFLOWAOT_WRAPPER_H
#define TFAOT_TEST_DOUBLE_TENSORFLOWAOT_WRAPPER_H

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tensorflow/compiler/tf2xla/xla_compiled_cpu_function.h"
#include "tensorflow/core/platform/types.h"
#include "third_party/eigen3/unsupported/Eigen/CXX11/Tensor"

#include "FWCore/Utilities/interface/Exception.h"
#include "PhysicsTools/TensorFlowAOT/interface/Util.h"

namespace tfaot {

class Wrapper {
 public:
  explicit Wrapper(const std::string& name)
      : name_(name), allocMode_(AllocMode::ARGS_VARIABLES_RESULTS_PROFILES_AND_TEMPS) {}
  Wrapper(const Wrapper&) = delete;
  Wrapper& operator=(const Wrapper&) = delete;
  Wrapper& operator=(Wrapper&&) = delete;
  virtual ~Wrapper() = default;

  const std::string& name() const { return name_; }
  AllocMode allocMode() const { return allocMode_; }

  virtual const std::vector<size_t>& batchSizes() const = 0;
  size_t nBatchSizes() const { return batchSizes().size(); }
  bool hasBatchSize(size_t batchSize) const {
    return std::binary_search(batchSizes().begin(), batchSizes().end(), batchSize);
  }

  virtual size_t nArgs() const = 0;
  virtual const std::map<size_t, std::vector<size_t>>& argCounts() const = 0;
  virtual const std::vector<size_t>& argCountsNoBatch() const = 0;
  template <typename T>
  T* argData(size_t batchSize, size_t argIndex);
  template <typename T>
  const T* argData(size_t batchSize, size_t argIndex) const;
  int argCount(size_t batchSize, size_t argIndex) const;
  int argCountNoBatch(size_t argIndex) const;

  virtual size_t nResults() const = 0;
  virtual const std::map<size_t, std::vector<size_t>>& resultCounts() const = 0;
  virtual const std::vector<size_t>& resultCountsNoBatch() const = 0;
  template <typename T>
  T* resultData(size_t batchSize, size_t resultIndex);
  template <typename T>
  const T* resultData(size_t batchSize, size_t resultIndex) const;
  int resultCount(size_t batchSize, size_t resultIndex) const;
  int resultCountNoBatch(size_t resultIndex) const;

  virtual bool runSilent(size_t batchSize) = 0;
  void run(size_t batchSize);

 protected:
  void unknownBatchSize(size_t batchSize, const std::string& method) const {
    throw cms::Exception("UnknownBatchSize") << name_ << ": no batch size " << batchSize << " (" << method << ")";
  }
  void unknownArgument(size_t argIndex, const std::string& method) const {
    throw cms::Exception("UnknownArgument") << name_ << ": no argument " << argIndex << " (" << method << ")";
  }
  void unknownResult(size_t resultIndex, const std::string& method) const {
    throw cms::Exception("UnknownResult") << name_ << ": no result " << resultIndex << " (" << method << ")";
  }

 private:
  std::string name_;
  AllocMode allocMode_;
};

}  // namespace tfaot

#endif
