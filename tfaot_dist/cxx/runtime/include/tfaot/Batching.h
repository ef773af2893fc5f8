#ifndef TFAOT_BATCHING_H
#define TFAOT_BATCHING_H

/*
 * tfaot-dist C++ interface: batch rules and batch strategies.
 *
 * A model is compiled for a few static batch sizes ("composite" sizes). A
 * BatchRule says how a target batch size is emulated: by evaluating the
 * compiled sizes in the given order and stitching the results, where only the
 * last evaluation may be zero-padded. In string form "5:2,2,2" means: target
 * 5, evaluate batch size 2 three times, the last call carries 4 + 2 - 5 = 1
 * padding row.
 *
 * A BatchStrategy is the set of rules of one model, at most one per target.
 */

#include <algorithm>
#include <climits>
#include <cstddef>
#include <map>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tfaot/Util.h"

namespace tfaot_dist {

class BatchRule {
 public:
  // target batch size, composite (compiled) batch sizes in evaluation order,
  // and the number of zero-padded rows of the last evaluation;
  // throws std::invalid_argument unless
  //   targetSize > 0, sizes not empty, all sizes > 0,
  //   lastPadding < sizes.back() and sum(sizes) - lastPadding == targetSize
  BatchRule(std::size_t targetSize, std::vector<std::size_t> sizes, std::size_t lastPadding = 0)
      : batchSize_(targetSize), sizes_(std::move(sizes)), lastPadding_(lastPadding) {
    validate("");
  }

  // rule string "TARGET:SIZE[,SIZE...]", e.g. "5:2,2,2"; the padding of the
  // last size is sum(sizes) - TARGET; whitespace around numbers is ignored;
  // throws std::invalid_argument for malformed strings and invalid rules.
  // Implicit, as CMSSW's: a string can stand where a rule is expected.
  BatchRule(const std::string& rule) : batchSize_(0), lastPadding_(0) {
    const std::string ctx = "batch rule '" + rule + "': ";
    const std::size_t colon = rule.find(':');
    if (colon == std::string::npos) {
      throw std::invalid_argument("tfaot: invalid " + ctx + "missing ':' (expected the form 'TARGET:SIZE[,SIZE...]'" +
                                  ", e.g. '5:2,2,2')");
    }
    batchSize_ = parseNumber(rule.substr(0, colon), ctx, "target batch size");
    std::size_t sum = 0;
    std::size_t start = colon + 1;
    while (true) {
      const std::size_t comma = rule.find(',', start);
      const std::string token = rule.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const std::size_t size = parseNumber(token, ctx, "composite batch size");
      sizes_.push_back(size);
      sum += size;
      if (comma == std::string::npos) {
        break;
      }
      start = comma + 1;
    }
    if (batchSize_ == 0) {
      throw std::invalid_argument("tfaot: invalid " + ctx + "the target batch size must be positive, got 0");
    }
    if (std::find(sizes_.begin(), sizes_.end(), std::size_t(0)) != sizes_.end()) {
      throw std::invalid_argument("tfaot: invalid " + ctx + "composite batch sizes must be positive");
    }
    if (sum < batchSize_) {
      throw std::invalid_argument("tfaot: invalid " + ctx + "the composite batch sizes sum up to " +
                                  std::to_string(sum) + ", which is less than the target batch size " +
                                  std::to_string(batchSize_));
    }
    lastPadding_ = sum - batchSize_;
    if (lastPadding_ >= sizes_.back()) {
      throw std::invalid_argument(
          "tfaot: invalid " + ctx + "the composite batch sizes sum up to " + std::to_string(sum) +
          ", exceeding the target batch size " + std::to_string(batchSize_) + " by " + std::to_string(lastPadding_) +
          ", but only the last evaluation may be padded, by less than its size " + std::to_string(sizes_.back()));
    }
    validate(ctx);
  }

  // the target batch size
  std::size_t getBatchSize() const { return batchSize_; }

  // the composite batch sizes, in evaluation order
  const std::vector<std::size_t>& getSizes() const { return sizes_; }

  // number of composite evaluations
  std::size_t nSizes() const { return sizes_.size(); }

  // composite batch size at position i (throws std::out_of_range)
  std::size_t getSize(std::size_t i) const {
    if (i >= sizes_.size()) {
      throw std::out_of_range("tfaot: batch rule '" + toString() + "' has " + std::to_string(sizes_.size()) +
                              " sizes, index " + std::to_string(i) + " is out of range");
    }
    return sizes_[i];
  }

  // number of zero-padded rows in the last evaluation
  std::size_t getLastPadding() const { return lastPadding_; }

  // the rule string, e.g. "5:2,2,2"; BatchRule(rule.toString()) == rule
  std::string toString() const { return std::to_string(batchSize_) + ":" + detail::join(sizes_); }

  bool operator==(const BatchRule& other) const {
    return batchSize_ == other.batchSize_ && sizes_ == other.sizes_ && lastPadding_ == other.lastPadding_;
  }
  bool operator!=(const BatchRule& other) const { return !(*this == other); }

 private:
  std::size_t batchSize_;
  std::vector<std::size_t> sizes_;
  std::size_t lastPadding_;

  // parses a non-negative decimal number that fits into an int
  static std::size_t parseNumber(const std::string& text, const std::string& ctx, const char* what) {
    const std::size_t b = text.find_first_not_of(" \t");
    const std::size_t e = text.find_last_not_of(" \t");
    const std::string s = b == std::string::npos ? std::string() : text.substr(b, e - b + 1);
    if (s.empty()) {
      throw std::invalid_argument("tfaot: invalid " + ctx + "empty " + what +
                                  " (expected the form 'TARGET:SIZE[,SIZE...]', e.g. '5:2,2,2')");
    }
    long long value = 0;
    for (char c : s) {
      if (c < '0' || c > '9') {
        throw std::invalid_argument("tfaot: invalid " + ctx + what + " '" + s +
                                    "' is not a non-negative integer (expected the form "
                                    "'TARGET:SIZE[,SIZE...]', e.g. '5:2,2,2')");
      }
      value = value * 10 + (c - '0');
      if (value > INT_MAX) {
        throw std::invalid_argument("tfaot: invalid " + ctx + what + " '" + s + "' is too large");
      }
    }
    return static_cast<std::size_t>(value);
  }

  void validate(const std::string& ctx) const {
    const std::string prefix = "tfaot: invalid " + (ctx.empty() ? "batch rule: " : ctx);
    if (batchSize_ == 0 || batchSize_ > static_cast<std::size_t>(INT_MAX)) {
      throw std::invalid_argument(prefix + "the target batch size must be positive and fit an int, got " +
                                  std::to_string(batchSize_));
    }
    if (sizes_.empty()) {
      throw std::invalid_argument(prefix + "no composite batch sizes given for target batch size " +
                                  std::to_string(batchSize_));
    }
    std::size_t sum = 0;
    for (std::size_t s : sizes_) {
      if (s == 0) {
        throw std::invalid_argument(prefix + "composite batch sizes must be positive, got " + detail::join(sizes_));
      }
      if (s > static_cast<std::size_t>(INT_MAX)) {
        throw std::invalid_argument(prefix + "composite batch size " + std::to_string(s) + " is too large");
      }
      sum += s;
    }
    if (lastPadding_ >= sizes_.back()) {
      throw std::invalid_argument(prefix + "the padding " + std::to_string(lastPadding_) +
                                  " must be smaller than the last composite batch size " +
                                  std::to_string(sizes_.back()));
    }
    if (sum - lastPadding_ != batchSize_) {
      throw std::invalid_argument(prefix + "composite batch sizes " + detail::join(sizes_) + " with padding " +
                                  std::to_string(lastPadding_) + " cover " + std::to_string(sum - lastPadding_) +
                                  " rows, but the target batch size is " + std::to_string(batchSize_));
    }
  }
};

inline std::ostream& operator<<(std::ostream& out, const BatchRule& rule) {
  return out << "BatchRule(" << rule.toString() << ", lastPadding=" << rule.getLastPadding() << ")";
}

class BatchStrategy {
 public:
  // registers a rule for its target batch size, replacing an existing one
  void setRule(const BatchRule& rule) { rules_.insert_or_assign(rule.getBatchSize(), rule); }

  // registers the rule of a rule string, e.g. "5:2,2,2" (see BatchRule)
  void setRule(const std::string& rule) { setRule(BatchRule(rule)); }

  // whether a rule for the target batch size exists
  bool hasRule(std::size_t batchSize) const { return rules_.find(batchSize) != rules_.end(); }

  // the rule for the target batch size; throws std::out_of_range if there is none
  const BatchRule& getRule(std::size_t batchSize) const {
    const auto it = rules_.find(batchSize);
    if (it == rules_.end()) {
      throw std::out_of_range("tfaot: no batch rule for target batch size " + std::to_string(batchSize) +
                              " (rules exist for: " + (rules_.empty() ? "none" : detail::join(targets())) + ")");
    }
    return it->second;
  }

  // removes the rule of a target batch size, returns whether there was one
  bool removeRule(std::size_t batchSize) { return rules_.erase(batchSize) > 0; }

  // number of rules
  std::size_t nRules() const { return rules_.size(); }

  // target batch sizes that have a rule, ascending
  std::vector<std::size_t> targets() const {
    std::vector<std::size_t> result;
    for (const auto& item : rules_) {
      result.push_back(item.first);
    }
    return result;
  }

  // the default rule: the target itself if it is a compiled size, otherwise
  // the smallest compiled size repeated until the target is reached or
  // exceeded, zero-padding the last evaluation;
  // throws std::invalid_argument if targetSize is 0 or no sizes are available
  static BatchRule makeDefaultRule(std::size_t targetSize, const std::vector<std::size_t>& availableSizes) {
    if (targetSize == 0) {
      throw std::invalid_argument(
          "tfaot: cannot create a default batch rule for target batch size 0: it must be positive");
    }
    if (availableSizes.empty()) {
      throw std::invalid_argument("tfaot: cannot create a default batch rule for target batch size " +
                                  std::to_string(targetSize) + ": no compiled batch sizes available");
    }
    if (std::find(availableSizes.begin(), availableSizes.end(), targetSize) != availableSizes.end()) {
      return BatchRule(targetSize, {targetSize}, 0);
    }
    const std::size_t smallest = *std::min_element(availableSizes.begin(), availableSizes.end());
    if (smallest == 0) {
      throw std::invalid_argument("tfaot: cannot create a default batch rule: invalid compiled batch size 0");
    }
    const std::size_t n = (targetSize + smallest - 1) / smallest;
    return BatchRule(targetSize, std::vector<std::size_t>(n, smallest), n * smallest - targetSize);
  }

  // creates, registers and returns the default rule of a target batch size
  const BatchRule& setDefaultRule(std::size_t targetSize, const std::vector<std::size_t>& availableSizes) {
    setRule(makeDefaultRule(targetSize, availableSizes));
    return rules_.find(targetSize)->second;
  }

  // all rules as strings, separated by blanks, e.g. "1:1 3:2,2 5:2,2,2"
  std::string toString() const {
    std::string result;
    for (const auto& item : rules_) {
      result += (result.empty() ? "" : " ") + item.second.toString();
    }
    return result;
  }

 private:
  std::map<std::size_t, BatchRule> rules_;
};

}  // namespace tfaot_dist

// Outside CMSSW the interface is also reachable as tfaot::... (tfaot::Model,
// tfaot::FloatArrays, ...). Inside CMSSW that namespace belongs to CMSSW's own
// PhysicsTools/TensorFlowAOT interface: ours gives way and stays tfaot_dist::.
#if !TFAOT_DIST_CMSSW_INTERFACE
namespace tfaot {
using namespace tfaot_dist;
}  // namespace tfaot
#endif

#endif  // TFAOT_BATCHING_H
