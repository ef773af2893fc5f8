// The TensorFlow side of `tfaot-dist bench`: a SavedModel run through the
// TensorFlow C API (TF_LoadSessionFromSavedModel, TF_SessionRun) of the wheel
// the package was compiled with, on a single thread (intra- and inter-op
// parallelism 1), as a CMSSW module runs a TensorFlow session.
//
//   tf_capi_bench time SPEC WARMUP CALLS BATCH_SIZE [BATCH_SIZE ...]
//   tf_capi_bench mem SPEC INSTANCES BATCH_SIZE     INSTANCES sessions, each run once
//
// SPEC is a text file written by tfaot_dist.bench:
//   saved_model DIR
//   input OP INDEX DTYPE DIM [DIM ...]   (dims without the batch dimension)
//   output OP INDEX
// Each measurement is one JSON object per line on stdout. Inputs are uniform
// random numbers from the same fixed seed as the AOT benchmark.
#include <malloc.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensorflow/c/c_api.h"

namespace {

struct TensorSpec {
  std::string op;
  int index = 0;
  TF_DataType dtype = TF_FLOAT;
  std::vector<int64_t> dims;
};

struct Spec {
  std::string savedModel;
  std::vector<TensorSpec> inputs, outputs;
};

TF_DataType parseDType(const std::string& name, std::size_t& size) {
  if (name == "float32") return size = 4, TF_FLOAT;
  if (name == "float64") return size = 8, TF_DOUBLE;
  if (name == "int32") return size = 4, TF_INT32;
  if (name == "int64") return size = 8, TF_INT64;
  if (name == "bool") return size = 1, TF_BOOL;
  throw std::runtime_error("unsupported dtype " + name);
}

std::size_t dtypeSize(TF_DataType t) {
  switch (t) {
    case TF_DOUBLE:
    case TF_INT64:
      return 8;
    case TF_BOOL:
      return 1;
    default:
      return 4;
  }
}

Spec readSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  Spec spec;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    if (kind == "saved_model") {
      std::getline(words >> std::ws, spec.savedModel);
    } else if (kind == "input" || kind == "output") {
      TensorSpec t;
      words >> t.op >> t.index;
      if (kind == "input") {
        std::string dtype;
        std::size_t size = 0;
        words >> dtype;
        t.dtype = parseDType(dtype, size);
        int64_t d;
        while (words >> d) t.dims.push_back(d);
        spec.inputs.push_back(t);
      } else {
        spec.outputs.push_back(t);
      }
    }
  }
  return spec;
}

void check(TF_Status* status, const std::string& what) {
  if (TF_GetCode(status) != TF_OK) throw std::runtime_error(what + ": " + TF_Message(status));
}

class Session {
 public:
  explicit Session(const Spec& spec) : spec_(spec) {
    status_ = TF_NewStatus();
    graph_ = TF_NewGraph();
    TF_SessionOptions* options = TF_NewSessionOptions();
    // ConfigProto{intra_op_parallelism_threads: 1, inter_op_parallelism_threads: 1}, serialized:
    // field 2 (varint) = 1, field 5 (varint) = 1.
    const unsigned char config[] = {0x10, 0x01, 0x28, 0x01};
    TF_SetConfig(options, config, sizeof config, status_);
    check(status_, "TF_SetConfig");
    const char* tags[] = {"serve"};
    session_ =
        TF_LoadSessionFromSavedModel(options, nullptr, spec.savedModel.c_str(), tags, 1, graph_, nullptr, status_);
    TF_DeleteSessionOptions(options);
    check(status_, "TF_LoadSessionFromSavedModel(" + spec.savedModel + ")");
    for (const TensorSpec& t : spec.inputs) inputs_.push_back(output(t));
    for (const TensorSpec& t : spec.outputs) outputs_.push_back(output(t));
  }

  ~Session() {
    freeInputs();
    TF_CloseSession(session_, status_);
    TF_DeleteSession(session_, status_);
    TF_DeleteGraph(graph_);
    TF_DeleteStatus(status_);
  }

  // random inputs of `rows` rows, kept for every run()
  void prepare(int64_t rows) {
    freeInputs();
    std::mt19937 rng(12345);
    std::uniform_real_distribution<double> dist(-2.0, 2.0);
    for (const TensorSpec& t : spec_.inputs) {
      std::vector<int64_t> dims = {rows};
      dims.insert(dims.end(), t.dims.begin(), t.dims.end());
      std::size_t count = 1;
      for (int64_t d : dims) count *= static_cast<std::size_t>(d);
      TF_Tensor* tensor =
          TF_AllocateTensor(t.dtype, dims.data(), static_cast<int>(dims.size()), count * dtypeSize(t.dtype));
      char* data = static_cast<char*>(TF_TensorData(tensor));
      for (std::size_t i = 0; i < count; i++) {
        const double x = dist(rng);
        switch (t.dtype) {
          case TF_FLOAT:
            reinterpret_cast<float*>(data)[i] = static_cast<float>(x);
            break;
          case TF_DOUBLE:
            reinterpret_cast<double*>(data)[i] = x;
            break;
          case TF_INT32:
            reinterpret_cast<int32_t*>(data)[i] = static_cast<int32_t>(x);
            break;
          case TF_INT64:
            reinterpret_cast<int64_t*>(data)[i] = static_cast<int64_t>(x);
            break;
          default:
            data[i] = x > 0;
            break;
        }
      }
      values_.push_back(tensor);
    }
  }

  void run() {
    std::vector<TF_Tensor*> results(outputs_.size(), nullptr);
    TF_SessionRun(session_, nullptr, inputs_.data(), values_.data(), static_cast<int>(values_.size()), outputs_.data(),
                  results.data(), static_cast<int>(results.size()), nullptr, 0, nullptr, status_);
    check(status_, "TF_SessionRun");
    for (TF_Tensor* r : results) TF_DeleteTensor(r);
  }

 private:
  TF_Output output(const TensorSpec& t) {
    TF_Operation* op = TF_GraphOperationByName(graph_, t.op.c_str());
    if (op == nullptr) throw std::runtime_error("no operation " + t.op + " in the graph");
    return TF_Output{op, t.index};
  }

  void freeInputs() {
    for (TF_Tensor* t : values_) TF_DeleteTensor(t);
    values_.clear();
  }

  const Spec& spec_;
  TF_Status* status_ = nullptr;
  TF_Graph* graph_ = nullptr;
  TF_Session* session_ = nullptr;
  std::vector<TF_Output> inputs_, outputs_;
  std::vector<TF_Tensor*> values_;
};

long statusKb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(key) + ":";
  while (std::getline(in, line)) {
    if (line.compare(0, prefix.size(), prefix) == 0) return std::strtol(line.c_str() + prefix.size(), nullptr, 10);
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "time" && argc > 5) {
      const Spec spec = readSpec(argv[2]);
      const long warmup = std::atol(argv[3]);
      const long calls = std::atol(argv[4]);
      Session session(spec);
      for (int i = 5; i < argc; i++) {
        const int rows = std::atoi(argv[i]);
        session.prepare(rows);
        for (long c = 0; c < warmup; c++) session.run();
        const auto start = std::chrono::steady_clock::now();
        for (long c = 0; c < calls; c++) session.run();
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
        std::printf("{\"batch_size\": %d, \"seconds_per_call\": %.9g, \"calls\": %ld, \"warmup\": %ld}\n", rows,
                    elapsed.count() / static_cast<double>(calls), calls, warmup);
        std::fflush(stdout);
      }
      return 0;
    }
    if (mode == "mem" && argc == 5) {
      const Spec spec = readSpec(argv[2]);
      const int instances = std::atoi(argv[3]);
      const int rows = std::atoi(argv[4]);
      std::vector<std::unique_ptr<Session>> sessions;
      for (int i = 0; i < instances; i++) {
        sessions.emplace_back(new Session(spec));
        sessions.back()->prepare(rows);
        sessions.back()->run();
      }
      const struct mallinfo2 heap = mallinfo2();
      std::printf(
          "{\"instances\": %d, \"batch_size\": %d, \"vm_hwm_kb\": %ld, \"vm_rss_kb\": %ld, "
          "\"heap_bytes\": %zu}\n",
          instances, rows, statusKb("VmHWM"), statusKb("VmRSS"), heap.uordblks + heap.hblkhd);
      std::fflush(stdout);
      std::_Exit(0);  // TensorFlow's static destructors are slow and irrelevant here
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tf_capi_bench: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s time SPEC WARMUP CALLS BATCH_SIZE... | mem SPEC INSTANCES BATCH_SIZE\n", argv[0]);
  return 2;
}
