// Runs the models test-simple and test-multi from a user area on the inputs
// TensorFlow saw when the packages were built (share/PACKAGE/reference/bs3)
// and prints each output next to TensorFlow's. Exit 1 if any differs by more
// than 1e-5 (absolute or relative), as in the packages' own verification.
//
// Usage: consumer AREA/tfaot
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tfaot/Model.h"
#include "tfaot-model-test-multi/model.h"
#include "tfaot-model-test-simple/model.h"

namespace {

const int kBatch = 3;  // not a compiled size: the model stitches 2 + 1
bool ok = true;

template <typename T>
std::vector<std::vector<T>> load(const std::string& path, int rows) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in || bytes.empty() || bytes.size() % (rows * sizeof(T)) != 0) {
    throw std::runtime_error(path + ": cannot read " + std::to_string(rows) + " rows");
  }
  const std::size_t cols = bytes.size() / (rows * sizeof(T));
  const T* flat = reinterpret_cast<const T*>(bytes.data());
  std::vector<std::vector<T>> out(rows);
  for (int r = 0; r < rows; r++) {
    out[r].assign(flat + r * cols, flat + (r + 1) * cols);
  }
  return out;
}

template <typename Got, typename Want>
void show(const char* model, const char* output, const std::vector<std::vector<Got>>& got,
          const std::vector<std::vector<Want>>& want) {
  for (std::size_t r = 0; r < got.size(); r++) {
    for (std::size_t c = 0; c < got[r].size(); c++) {
      const double a = static_cast<double>(got[r][c]), b = static_cast<double>(want[r][c]);
      const double diff = std::fabs(a - b);
      const bool good = diff <= 1e-5 || diff <= 1e-5 * std::fabs(b);
      ok = ok && good;
      std::printf("%-12s %-9s row %zu col %zu  aot %.9g  tensorflow %.9g%s\n", model, output, r, c, a, b,
                  good ? "" : "  MISMATCH");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s AREA/tfaot\n", argv[0]);
    return 2;
  }
  const std::string area = argv[1];
  const std::string simpleRef = area + "/tfaot-model-test-simple/1.0.0/share/tfaot-model-test-simple/reference/bs3/";
  const std::string multiRef = area + "/tfaot-model-test-multi/1.0.0/share/tfaot-model-test-multi/reference/bs3/";
  try {
    tfaot::Model<tfaot_model::simple> simple;
    // which x86-64 level's code runs (the best this CPU has; TFAOT_CPU_LEVEL=x86-64 forces the generic one)
    std::fprintf(stderr, "test-simple runs its %s code\n", simple.cpuLevel());
    tfaot::FloatArrays y;
    std::tie(y) = simple.run<tfaot::FloatArrays>(kBatch, load<float>(simpleRef + "input_0.bin", kBatch));
    show("test-simple", "output_0", y, load<float>(simpleRef + "output_0.bin", kBatch));

    tfaot::Model<tfaot_model::multi> multi;
    tfaot::FloatArrays y0;
    tfaot::BoolArrays y1;
    std::tie(y0, y1) = multi.run<tfaot::FloatArrays, tfaot::BoolArrays>(
        kBatch, load<float>(multiRef + "input_0.bin", kBatch), load<double>(multiRef + "input_1.bin", kBatch));
    show("test-multi", "output_0", y0, load<float>(multiRef + "output_0.bin", kBatch));
    show("test-multi", "output_1", y1, load<bool>(multiRef + "output_1.bin", kBatch));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
  std::printf("%s\n", ok ? "all outputs agree with TensorFlow within 1e-5" : "MISMATCH");
  return ok ? 0 : 1;
}
