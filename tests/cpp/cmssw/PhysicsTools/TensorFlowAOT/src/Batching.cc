// Test double of CMSSW's batching code for tfaot-dist's tests (our code).
#include <algorithm>
#include <numeric>

#include "FWCore/Utilities/interface/Exception.h"
#include "PhysicsTools/TensorFlowAOT/interface/Batching.h"

namespace tfaot {

BatchRule::BatchRule(size_t batchSize, const std::vector<size_t>& sizes, size_t lastPadding)
    : batchSize_(batchSize), sizes_(sizes), lastPadding_(lastPadding) {
  validate();
}

BatchRule::BatchRule(const std::string& ruleString) : batchSize_(0), lastPadding_(0) {
  const size_t colon = ruleString.find(':');
  if (colon == std::string::npos) {
    throw cms::Exception("InvalidBatchRule") << "no ':' in " << ruleString;
  }
  batchSize_ = std::stoul(ruleString.substr(0, colon));
  for (size_t start = colon + 1; start <= ruleString.size();) {
    const size_t comma = std::min(ruleString.find(',', start), ruleString.size());
    sizes_.push_back(std::stoul(ruleString.substr(start, comma - start)));
    start = comma + 1;
  }
  const size_t total = std::accumulate(sizes_.begin(), sizes_.end(), size_t(0));
  if (total < batchSize_) {
    throw cms::Exception("InvalidBatchRule") << "sizes of " << ruleString << " do not cover the batch size";
  }
  lastPadding_ = total - batchSize_;
  validate();
}

void BatchRule::validate() const {
  if (sizes_.empty()) {
    throw cms::Exception("EmptySizes") << "batch rule without sizes";
  }
  if (lastPadding_ >= sizes_.back()) {
    throw cms::Exception("WrongPadding") << "padding " << lastPadding_ << " not below the last size";
  }
  const size_t total = std::accumulate(sizes_.begin(), sizes_.end(), size_t(0));
  if (total - lastPadding_ != batchSize_) {
    throw cms::Exception("WrongBatchSize")
        << "sizes minus padding give " << total - lastPadding_ << ", not " << batchSize_;
  }
}

std::ostream& operator<<(std::ostream& out, const BatchRule& rule) {
  out << "BatchRule(" << rule.getBatchSize() << ":";
  for (size_t i = 0; i < rule.nSizes(); i++) {
    out << (i ? "," : "") << rule.getSize(i);
  }
  return out << ", padding " << rule.getLastPadding() << ")";
}

const BatchRule& BatchStrategy::getRule(size_t batchSize) const {
  const auto found = rules_.find(batchSize);
  if (found == rules_.end()) {
    throw cms::Exception("UnknownBatchSize") << "no rule for batch size " << batchSize;
  }
  return found->second;
}

void BatchStrategy::setDefaultRule(size_t batchSize, const std::vector<size_t>& availableBatchSizes) {
  if (std::find(availableBatchSizes.begin(), availableBatchSizes.end(), batchSize) != availableBatchSizes.end()) {
    setRule(BatchRule(batchSize, {batchSize}));
    return;
  }
  const size_t smallest = *std::min_element(availableBatchSizes.begin(), availableBatchSizes.end());
  const size_t n = (batchSize + smallest - 1) / smallest;
  setRule(BatchRule(batchSize, std::vector<size_t>(n, smallest), n * smallest - batchSize));
}

}  // namespace tfaot
