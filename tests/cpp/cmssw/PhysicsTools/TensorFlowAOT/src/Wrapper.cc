// Test double of CMSSW's wrapper library code for tfaot-dist's tests (our code).
#include "PhysicsTools/TensorFlowAOT/interface/Wrapper.h"

namespace tfaot {

namespace {
const std::vector<size_t>& countsAt(const std::map<size_t, std::vector<size_t>>& counts, size_t batchSize,
                                    const Wrapper& w) {
  const auto found = counts.find(batchSize);
  if (found == counts.end()) {
    throw cms::Exception("UnknownBatchSize") << w.name() << ": no batch size " << batchSize;
  }
  return found->second;
}
}  // namespace

int Wrapper::argCount(size_t batchSize, size_t argIndex) const {
  const std::vector<size_t>& counts = countsAt(argCounts(), batchSize, *this);
  if (argIndex >= counts.size()) {
    unknownArgument(argIndex, "argCount()");
  }
  return static_cast<int>(counts[argIndex]);
}

int Wrapper::argCountNoBatch(size_t argIndex) const {
  if (argIndex >= argCountsNoBatch().size()) {
    unknownArgument(argIndex, "argCountNoBatch()");
  }
  return static_cast<int>(argCountsNoBatch()[argIndex]);
}

int Wrapper::resultCount(size_t batchSize, size_t resultIndex) const {
  const std::vector<size_t>& counts = countsAt(resultCounts(), batchSize, *this);
  if (resultIndex >= counts.size()) {
    unknownResult(resultIndex, "resultCount()");
  }
  return static_cast<int>(counts[resultIndex]);
}

int Wrapper::resultCountNoBatch(size_t resultIndex) const {
  if (resultIndex >= resultCountsNoBatch().size()) {
    unknownResult(resultIndex, "resultCountNoBatch()");
  }
  return static_cast<int>(resultCountsNoBatch()[resultIndex]);
}

void Wrapper::run(size_t batchSize) {
  if (!runSilent(batchSize)) {
    throw cms::Exception("FailedRun") << name() << ": evaluation at batch size " << batchSize << " failed";
  }
}

}  // namespace tfaot
