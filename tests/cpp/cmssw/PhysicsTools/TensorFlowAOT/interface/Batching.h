// Test double of CMSSW's PhysicsTools/TensorFlowAOT/interface/Batching.h for
// tfaot-dist's tests: the declarations of CMSSW's contract (facts), our code.
// Out-of-line parts are in ../src/Batching.cc, as CMSSW links them from a library.
#ifndef TFAOT_TEST_DOUBLE_TENSORFLOWAOT_BATCHING_H
#define TFAOT_TEST_DOUBLE_TENSORFLOWAOT_BATCHING_H

#include <cstddef>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace tfaot {

class BatchRule {
 public:
  explicit BatchRule(size_t batchSize, const std::vector<size_t>& sizes, size_t lastPadding = 0);
  BatchRule(const std::string& ruleString);  // "TARGET:SIZE,...", padding inferred
  ~BatchRule() = default;

  size_t getBatchSize() const { return batchSize_; }
  const std::vector<size_t>& getSizes() const { return sizes_; }
  size_t getLastPadding() const { return lastPadding_; }
  size_t nSizes() const { return sizes_.size(); }
  size_t getSize(size_t i) const { return sizes_[i]; }

 private:
  size_t batchSize_;
  std::vector<size_t> sizes_;
  size_t lastPadding_;

  void validate() const;
};

std::ostream& operator<<(std::ostream& out, const BatchRule& rule);

class BatchStrategy {
 public:
  explicit BatchStrategy() = default;
  ~BatchStrategy() = default;

  void setRule(const BatchRule& rule) { rules_.insert_or_assign(rule.getBatchSize(), rule); }
  void setRule(const std::string& ruleString) { setRule(BatchRule(ruleString)); }
  bool hasRule(size_t batchSize) const { return rules_.count(batchSize) > 0; }
  const BatchRule& getRule(size_t batchSize) const;
  void setDefaultRule(size_t batchSize, const std::vector<size_t>& availableBatchSizes);

 private:
  std::map<size_t, BatchRule> rules_;
};

}  // namespace tfaot

#endif
