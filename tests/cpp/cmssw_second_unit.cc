/*
 * A second translation unit of the CMSSW-style consumer: the same model.h
 * files again (everything in them must be inline, or the link fails with
 * multiple definitions), and tfaot-dist's own interface next to CMSSW's in one
 * unit (ours gives way: tfaot:: is CMSSW's, ours is tfaot_dist::).
 */

#include <iostream>

#include "PhysicsTools/TensorFlowAOT/interface/Model.h"
#include "tfaot/Model.h"

#include "tfaot-model-multi/model.h"
#include "tfaot-model-simple/model.h"

int secondUnitChecks();
int secondUnitChecks() {
  int failures = 0;
  tfaot_model::multi multi;
  const tfaot::Wrapper& base = multi;
  failures += base.nArgs() != 2 || base.nResults() != 2;
  failures += base.argCountNoBatch(1) != 4 || base.resultCount(4, 0) != 8;
  failures += !base.hasBatchSize(4) || base.hasBatchSize(3);
  failures += base.name() != "tfaot_model_multi";
  // our interface, reachable as tfaot_dist:: only
  tfaot_dist::BatchStrategy strategy;
  strategy.setRule("5:2,2,2");
  failures += strategy.getRule(5).getLastPadding() != 1;
  std::cout << "second unit: " << failures << " failures" << std::endl;
  return failures;
}
