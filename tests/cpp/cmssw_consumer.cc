/*
 * A CMSSW-style consumer of tfaot-dist packages: it includes CMSSW's
 * interface (here: the test double in tests/cpp/cmssw, compiled like the
 * real one) and the packages' model.h, and runs them with tfaot::Model<W>,
 * as a CMSSW plugin does with cms-tfaot packages.
 *
 * Usage: cmssw_consumer SIMPLE_REF_DIR MULTI_REF_DIR SIZE...
 * Each SIZE is a batch size with TensorFlow's numbers in REF_DIR/bsSIZE/
 * ({input,output}_I.bin); compiled and emulated sizes alike. Exit code 0 when
 * every output matches; prints one line per model and size.
 */

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <type_traits>
#include <string>
#include <vector>

#include "PhysicsTools/TensorFlowAOT/interface/Model.h"

#include "tfaot-model-multi/model.h"
#include "tfaot-model-simple/model.h"

// defined in cmssw_second_unit.cc, which includes the same model.h files
int secondUnitChecks();

namespace {

template <typename T>
std::vector<std::vector<T>> load(const std::string& path, size_t rows) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t values = bytes.size() / (std::is_same_v<T, bool> ? 1 : sizeof(T));
  std::vector<std::vector<T>> out(rows);
  for (size_t i = 0; i < values; i++) {
    T value;
    if constexpr (std::is_same_v<T, bool>) {
      value = bytes[i] != 0;
    } else {
      std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
    }
    out[i / (values / rows)].push_back(value);
  }
  return out;
}

template <typename T>
bool same(const std::vector<std::vector<T>>& got, const std::vector<std::vector<T>>& want, const std::string& what) {
  bool ok = got.size() == want.size();
  for (size_t r = 0; ok && r < got.size(); r++) {
    ok = got[r].size() == want[r].size();
    for (size_t j = 0; ok && j < got[r].size(); j++) {
      const double a = static_cast<double>(got[r][j]), b = static_cast<double>(want[r][j]);
      ok = std::fabs(a - b) <= 1e-5 * std::max(1.0, std::fabs(b));
      if (!ok) {
        std::cout << what << ": [" << r << "][" << j << "] " << a << " != " << b << std::endl;
      }
    }
  }
  if (got.size() != want.size()) {
    std::cout << what << ": " << got.size() << " rows, TensorFlow " << want.size() << std::endl;
  }
  return ok;
}

std::string ref(const std::string& dir, size_t bs, const char* kind, int i) {
  return dir + "/bs" + std::to_string(bs) + "/" + kind + "_" + std::to_string(i) + ".bin";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: cmssw_consumer SIMPLE_REF MULTI_REF SIZE..." << std::endl;
    return 2;
  }
  const std::string simpleRef = argv[1], multiRef = argv[2];
  int failures = 0;

  tfaot::Model<tfaot_model::simple> simple;
  tfaot::Model<tfaot_model::multi> multi;
  multi.setBatchRule("7:4,4");  // a rule of the user's, padded, instead of the default 2,2,2,2
  std::cout << "names " << simple.name() << " " << multi.name() << std::endl;
  // CMSSW's Model hides the wrapper: the level a model constructed now runs, from the class
  std::cout << "cpu levels " << tfaot_model::simple::chooseCpuLevel() << " " << tfaot_model::multi::chooseCpuLevel()
            << std::endl;

  for (int a = 3; a < argc; a++) {
    const size_t n = std::strtoul(argv[a], nullptr, 10);
    tfaot::FloatArrays y;
    std::tie(y) = simple.run<tfaot::FloatArrays>(n, load<float>(ref(simpleRef, n, "input", 0), n));
    const bool simpleOk = same(y, load<float>(ref(simpleRef, n, "output", 0), n), "simple");

    tfaot::FloatArrays probs;
    tfaot::BoolArrays flags;
    std::tie(probs, flags) = multi.run<tfaot::FloatArrays, tfaot::BoolArrays>(
        n, load<float>(ref(multiRef, n, "input", 0), n), load<double>(ref(multiRef, n, "input", 1), n));
    const bool multiOk = same(probs, load<float>(ref(multiRef, n, "output", 0), n), "multi output_0") &&
                         same(flags, load<bool>(ref(multiRef, n, "output", 1), n), "multi output_1");
    std::cout << "batch size " << n << ": simple " << (simpleOk ? "ok" : "DIFFERS") << ", multi "
              << (multiOk ? "ok" : "DIFFERS") << std::endl;
    failures += !simpleOk + !multiOk;
  }

  // errors are CMSSW's exceptions, with CMSSW's categories
  tfaot_model::simple wrapper;
  try {
    wrapper.argData<float>(3, 0);
    failures++;
    std::cout << "argData at an uncompiled batch size did not throw" << std::endl;
  } catch (const cms::Exception& e) {
    std::cout << "throws " << e.category() << std::endl;
    failures += e.category() != "UnknownBatchSize";
  }
  try {
    wrapper.resultData<float>(1, 5);
    failures++;
  } catch (const cms::Exception& e) {
    std::cout << "throws " << e.category() << std::endl;
    failures += e.category() != "UnknownResult";
  }
  failures += secondUnitChecks();
  std::cout << failures << " failures" << std::endl;
  return failures == 0 ? 0 : 1;
}
