/*
 * Tests of the tfaot C++ interface (tfaot/Model.h) with the generated model.h
 * of the example models "simple" (f32[4] -> f32[2]) and "multi" (f32[4],
 * f64[4] -> f32[2], bool[2]), both compiled for batch sizes 1, 2 and 4, plus a
 * mock wrapper that checks the batching mechanics without compiled code.
 *
 * Usage: test_interface SIMPLE_REF_DIR MULTI_REF_DIR
 * where each reference dir holds bsN/input_I.bin and bsN/output_I.bin
 * (TensorFlow's inputs and outputs, raw little-endian, bool as one byte).
 *
 * Expects model.h of "simple" rendered without default rules and model.h of
 * "multi" rendered with the default rule "3:2,2". Exit code 0 on success.
 */

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "tfaot/Model.h"

#include "tfaot-model-multi/model.h"
#include "tfaot-model-simple/model.h"

// ---------------------------------------------------------------------------
// minimal test harness

static int nChecks = 0;
static int nFailures = 0;

#define TEST_CHECK(cond)                                                                    \
  do {                                                                                      \
    nChecks++;                                                                              \
    if (!(cond)) {                                                                          \
      nFailures++;                                                                          \
      std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK failed: " << #cond << std::endl; \
    }                                                                                       \
  } while (false)

// checks that f() throws an exception of type E whose message contains `needle`
template <typename E, typename F>
static void expectThrow(const std::string& what, F&& f, const std::string& needle, int line) {
  nChecks++;
  try {
    f();
  } catch (const E& e) {
    const std::string msg = e.what();
    if (msg.find(needle) == std::string::npos) {
      nFailures++;
      std::cerr << "line " << line << ": " << what << ": message '" << msg << "' lacks '" << needle << "'" << std::endl;
    } else {
      std::cout << "  ok, throws: " << msg << std::endl;
    }
    return;
  } catch (const std::exception& e) {
    nFailures++;
    std::cerr << "line " << line << ": " << what << ": threw the wrong exception type: " << e.what() << std::endl;
    return;
  }
  nFailures++;
  std::cerr << "line " << line << ": " << what << ": did not throw" << std::endl;
}

#define EXPECT_THROW(E, stmt, needle) expectThrow<E>(#stmt, [&]() { stmt; }, needle, __LINE__)

// ---------------------------------------------------------------------------
// reference data

static std::string simpleRef;
static std::string multiRef;

template <typename T>
static std::vector<T> readFlat(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    throw std::runtime_error("cannot open " + path);
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() % sizeof(T) != 0) {
    throw std::runtime_error(path + ": size is not a multiple of the element size");
  }
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), bytes.size());  // the test machines are little-endian
  return values;
}

// bools are stored as one byte each; std::vector<bool> cannot be memcpy'd
static std::vector<bool> readBools(const std::string& path) {
  std::vector<std::uint8_t> bytes = readFlat<std::uint8_t>(path);
  return std::vector<bool>(bytes.begin(), bytes.end());
}

template <typename T>
static std::vector<std::vector<T>> nest(const std::vector<T>& flat, std::size_t rows) {
  std::vector<std::vector<T>> out(rows);
  const std::size_t rowSize = rows == 0 ? 0 : flat.size() / rows;
  for (std::size_t r = 0; r < rows; r++) {
    out[r].assign(flat.begin() + static_cast<std::ptrdiff_t>(r * rowSize),
                  flat.begin() + static_cast<std::ptrdiff_t>((r + 1) * rowSize));
  }
  return out;
}

static std::string refPath(const std::string& dir, int bs, const char* kind, int index) {
  return dir + "/bs" + std::to_string(bs) + "/" + kind + "_" + std::to_string(index) + ".bin";
}

static bool close(double a, double b) {
  const double diff = std::fabs(a - b);
  return diff <= 1e-5 || diff <= 1e-5 * std::max(std::fabs(a), std::fabs(b));
}

template <typename T>
static bool allClose(const std::vector<std::vector<T>>& got, const std::vector<std::vector<T>>& want) {
  if (got.size() != want.size()) {
    std::cerr << "  row count " << got.size() << " != " << want.size() << std::endl;
    return false;
  }
  for (std::size_t r = 0; r < got.size(); r++) {
    if (got[r].size() != want[r].size()) {
      std::cerr << "  row " << r << " size " << got[r].size() << " != " << want[r].size() << std::endl;
      return false;
    }
    for (std::size_t j = 0; j < got[r].size(); j++) {
      if (!close(got[r][j], want[r][j])) {
        std::cerr << "  [" << r << "][" << j << "]: " << got[r][j] << " != " << want[r][j] << std::endl;
        return false;
      }
    }
  }
  return true;
}

template <typename T>
static bool allCloseFlat(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) {
    return false;
  }
  for (std::size_t i = 0; i < got.size(); i++) {
    if (!close(got[i], want[i])) {
      std::cerr << "  [" << i << "]: " << got[i] << " != " << want[i] << std::endl;
      return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------
// BatchRule and BatchStrategy

static void testBatchRule() {
  std::cout << "\n== BatchRule" << std::endl;
  using tfaot::BatchRule;

  BatchRule r1(5, {2, 2, 2}, 1);
  TEST_CHECK(r1.getBatchSize() == 5);
  TEST_CHECK(r1.nSizes() == 3);
  TEST_CHECK(r1.getSize(2) == 2);
  TEST_CHECK((r1.getSizes() == std::vector<std::size_t>{2, 2, 2}));
  TEST_CHECK(r1.getLastPadding() == 1);
  TEST_CHECK(r1.toString() == "5:2,2,2");

  BatchRule r2("5:2,2,2");
  TEST_CHECK(r2 == r1);
  TEST_CHECK(BatchRule(r1.toString()) == r1);
  TEST_CHECK(BatchRule(" 3 : 2 , 2 ") == BatchRule(3, {2, 2}, 1));
  TEST_CHECK(BatchRule("4:4").getLastPadding() == 0);
  TEST_CHECK(BatchRule("7:4,4").getLastPadding() == 1);
  std::ostringstream s;
  s << r1;
  TEST_CHECK(s.str() == "BatchRule(5:2,2,2, lastPadding=1)");
  EXPECT_THROW(std::out_of_range, r1.getSize(3), "out of range");

  // malformed strings
  EXPECT_THROW(std::invalid_argument, BatchRule("5"), "missing ':'");
  EXPECT_THROW(std::invalid_argument, BatchRule(""), "missing ':'");
  EXPECT_THROW(std::invalid_argument, BatchRule("5:"), "empty composite batch size");
  EXPECT_THROW(std::invalid_argument, BatchRule(":5"), "empty target batch size");
  EXPECT_THROW(std::invalid_argument, BatchRule("5:2,,3"), "empty composite batch size");
  EXPECT_THROW(std::invalid_argument, BatchRule("5:2,3,"), "empty composite batch size");
  EXPECT_THROW(std::invalid_argument, BatchRule("a:1"), "'a' is not a non-negative integer");
  EXPECT_THROW(std::invalid_argument, BatchRule("5:2;3"), "'2;3' is not a non-negative integer");
  EXPECT_THROW(std::invalid_argument, BatchRule("-5:1"), "'-5' is not a non-negative integer");
  EXPECT_THROW(std::invalid_argument, BatchRule("5:2.5,3"), "is not a non-negative integer");
  EXPECT_THROW(std::invalid_argument, BatchRule("99999999999:1"), "too large");
  // semantically invalid strings
  EXPECT_THROW(std::invalid_argument, BatchRule("0:1"), "must be positive");
  EXPECT_THROW(std::invalid_argument, BatchRule("5:1"), "sum up to 1, which is less than the target batch size 5");
  EXPECT_THROW(std::invalid_argument, BatchRule("5:2,2"), "less than the target batch size 5");
  EXPECT_THROW(std::invalid_argument, BatchRule("5:0,5"), "must be positive");
  EXPECT_THROW(std::invalid_argument, BatchRule("3:4,4"), "exceeding the target batch size 3 by 5");
  EXPECT_THROW(std::invalid_argument, BatchRule("1:2,2"), "only the last evaluation may be padded");

  // invalid explicit rules
  EXPECT_THROW(std::invalid_argument, BatchRule(0, {1}), "target batch size must be positive");
  EXPECT_THROW(std::invalid_argument, BatchRule(-2, {1}), "target batch size must be positive");
  EXPECT_THROW(std::invalid_argument, BatchRule(5, {}), "no composite batch sizes");
  EXPECT_THROW(std::invalid_argument, BatchRule(5, {5, 0}), "must be positive");
  EXPECT_THROW(std::invalid_argument, BatchRule(3, {2, 2}, 2), "padding 2 must be smaller than the last");
  EXPECT_THROW(std::invalid_argument, BatchRule(3, {2, 4}, 4), "padding 4 must be smaller than the last");
  EXPECT_THROW(std::invalid_argument, BatchRule(3, {2, 2}), "cover 4 rows, but the target batch size is 3");
  EXPECT_THROW(std::invalid_argument, BatchRule(5, {2, 2}), "cover 4 rows, but the target batch size is 5");
}

static void testBatchStrategy() {
  std::cout << "\n== BatchStrategy" << std::endl;
  using tfaot::BatchRule;
  using tfaot::BatchStrategy;

  BatchStrategy strategy;
  TEST_CHECK(strategy.nRules() == 0);
  TEST_CHECK(!strategy.hasRule(3));
  EXPECT_THROW(std::out_of_range, strategy.getRule(3), "no batch rule for target batch size 3");
  strategy.setRule(BatchRule("3:2,2"));
  strategy.setRule(BatchRule("5:2,2,2"));
  TEST_CHECK(strategy.hasRule(3));
  TEST_CHECK(strategy.getRule(3).getLastPadding() == 1);
  strategy.setRule(BatchRule("3:1,1,1"));  // replaces
  TEST_CHECK(strategy.nRules() == 2);
  TEST_CHECK(strategy.getRule(3).nSizes() == 3);
  TEST_CHECK((strategy.targets() == std::vector<std::size_t>{3, 5}));
  TEST_CHECK(strategy.toString() == "3:1,1,1 5:2,2,2");
  TEST_CHECK(strategy.removeRule(3));
  TEST_CHECK(!strategy.removeRule(3));
  EXPECT_THROW(std::out_of_range, strategy.getRule(3), "rules exist for: 5");

  // default rules: exact size if compiled, else the smallest size repeated, padding the last
  TEST_CHECK(BatchStrategy::makeDefaultRule(2, {1, 2, 4}).toString() == "2:2");
  TEST_CHECK(BatchStrategy::makeDefaultRule(4, {1, 2, 4}).toString() == "4:4");
  TEST_CHECK(BatchStrategy::makeDefaultRule(3, {1, 2, 4}).toString() == "3:1,1,1");
  TEST_CHECK(BatchStrategy::makeDefaultRule(7, {4, 2}).toString() == "7:2,2,2,2");
  TEST_CHECK(BatchStrategy::makeDefaultRule(7, {4, 2}).getLastPadding() == 1);
  TEST_CHECK(BatchStrategy::makeDefaultRule(1, {4}).getLastPadding() == 3);
  EXPECT_THROW(std::invalid_argument, BatchStrategy::makeDefaultRule(0, {1, 2}), "must be positive");
  EXPECT_THROW(std::invalid_argument, BatchStrategy::makeDefaultRule(3, {}), "no compiled batch sizes");
  TEST_CHECK(strategy.setDefaultRule(9, {2, 4}).toString() == "9:2,2,2,2,2");
  TEST_CHECK(strategy.hasRule(9));

  // CMSSW's API: rules from strings, sizes as size_t
  strategy.setRule(std::string("6:4,4"));
  TEST_CHECK(strategy.getRule(6).getLastPadding() == 2);
  strategy.setRule("8:4,4");
  TEST_CHECK(strategy.getRule(8).nSizes() == 2);
  const BatchRule implicit = std::string("3:2,2");
  const std::size_t target = implicit.getBatchSize();
  TEST_CHECK(target == 3);
  const std::vector<std::size_t> available = {2, 4};
  TEST_CHECK(strategy.setDefaultRule(std::size_t{5}, available).toString() == "5:2,2,2");
}

// ---------------------------------------------------------------------------
// mock wrapper: checks stitching, zero padding, scalar shapes and int types
// without compiled code. Computes, per row r of a compiled batch size:
//   out0[r]    = sum(in0[r]) (int32 -> double, scalar output)
//   out1[r][j] = in1[r][j] * 10 (int64, shape [2])
// and records the compiled sizes it ran and whether padding rows were zero.

struct MockLog {
  std::vector<int> runs;
  bool paddingZero = true;
  std::size_t expectRows = 0;  // rows of the current call that carry data
};

class MockModel {
 public:
  static constexpr int tfaotContractVersion = 1;
  using InputTypes = std::tuple<std::int32_t, std::int64_t>;
  using OutputTypes = std::tuple<double, std::int64_t>;

  static MockLog log;
  static std::vector<std::string> rules;

  static const char* name() { return "mock"; }
  static const char* package() { return "tfaot-model-mock"; }
  static std::vector<int> batchSizes() { return {2, 3}; }
  static std::vector<std::string> defaultRules() { return rules; }
  static std::vector<std::string> inputNames() { return {"a", "b"}; }
  static std::vector<std::string> outputNames() { return {"sum", "times10"}; }
  static std::vector<std::string> inputDTypes() { return {"int32", "int64"}; }
  static std::vector<std::string> outputDTypes() { return {"float64", "int64"}; }
  static std::vector<std::vector<std::int64_t>> inputShapes() { return {{3}, {2}}; }
  static std::vector<std::vector<std::int64_t>> outputShapes() { return {{}, {2}}; }

  void* argData(int bs, std::size_t i) { return i == 0 ? static_cast<void*>(slot(bs).a.data()) : slot(bs).b.data(); }
  const void* resultData(int bs, std::size_t k) {
    return k == 0 ? static_cast<const void*>(slot(bs).sum.data()) : slot(bs).times10.data();
  }
  void run(int bs) {
    Slot& s = slot(bs);
    log.runs.push_back(bs);
    for (std::size_t r = 0; r < static_cast<std::size_t>(bs); r++) {
      s.sum[r] = static_cast<double>(s.a[3 * r] + s.a[3 * r + 1] + s.a[3 * r + 2]);
      s.times10[2 * r] = s.b[2 * r] * 10;
      s.times10[2 * r + 1] = s.b[2 * r + 1] * 10;
    }
    // at most the last call of a rule is padded: rows beyond the data must be zero
    const std::size_t dataRows = std::min<std::size_t>(log.expectRows, static_cast<std::size_t>(bs));
    for (std::size_t r = dataRows; r < static_cast<std::size_t>(bs); r++) {
      for (std::size_t j = 0; j < 3; j++) {
        log.paddingZero = log.paddingZero && s.a[3 * r + j] == 0;
      }
      log.paddingZero = log.paddingZero && s.b[2 * r] == 0 && s.b[2 * r + 1] == 0;
    }
    log.expectRows -= dataRows;
  }

 private:
  struct Slot {
    std::vector<std::int32_t> a;
    std::vector<std::int64_t> b;
    std::vector<double> sum;
    std::vector<std::int64_t> times10;
  };
  Slot slots_[2];
  Slot& slot(int bs) {
    if (bs != 2 && bs != 3) {
      throw std::invalid_argument("mock: not compiled for batch size " + std::to_string(bs));
    }
    Slot& s = slots_[bs - 2];
    if (s.a.empty()) {
      const std::size_t n = static_cast<std::size_t>(bs);
      // fill with garbage so that missing zero padding is detected
      s.a.assign(3 * n, 77);
      s.b.assign(2 * n, 77);
      s.sum.assign(n, 0.0);
      s.times10.assign(2 * n, 0);
    }
    return s;
  }
};
MockLog MockModel::log;
std::vector<std::string> MockModel::rules = {"4:2,3"};

static void testMock() {
  std::cout << "\n== mock wrapper" << std::endl;
  MockModel::rules = {"4:2,3"};
  tfaot::Model<MockModel> model;
  TEST_CHECK(model.getBatchStrategy().hasRule(4));  // default rule of the package
  TEST_CHECK(model.getBatchStrategy().getRule(4).toString() == "4:2,3");
  TEST_CHECK(model.input(0).rowSize == 3);
  TEST_CHECK(model.output(0).rowSize == 1);  // scalar output: shape [], one element per row
  TEST_CHECK(model.output(0).toString() == "sum: float64[]");
  TEST_CHECK(model.outputIndex("times10") == 1);
  std::cout << "  " << model.summary() << std::endl;

  auto makeInputs = [](int n) {
    tfaot::Int32Arrays a(static_cast<std::size_t>(n));
    tfaot::Int64Arrays b(static_cast<std::size_t>(n));
    for (int r = 0; r < n; r++) {
      a[static_cast<std::size_t>(r)] = {r, 2 * r, 3 * r};
      b[static_cast<std::size_t>(r)] = {r, -r};
    }
    return std::make_pair(a, b);
  };
  auto verify = [](int n, const tfaot::DoubleArrays& sum, const tfaot::Int64Arrays& t10) {
    bool ok = sum.size() == static_cast<std::size_t>(n) && t10.size() == static_cast<std::size_t>(n);
    for (int r = 0; ok && r < n; r++) {
      const std::size_t i = static_cast<std::size_t>(r);
      ok = sum[i].size() == 1 && sum[i][0] == 6.0 * r && t10[i] == std::vector<std::int64_t>{10 * r, -10 * r};
    }
    return ok;
  };

  for (int n : {1, 2, 3, 4, 5, 8}) {
    auto [a, b] = makeInputs(n);
    MockModel::log = MockLog();
    MockModel::log.expectRows = static_cast<std::size_t>(n);
    tfaot::DoubleArrays sum;
    tfaot::Int64Arrays t10;
    std::tie(sum, t10) = model.run<tfaot::DoubleArrays, tfaot::Int64Arrays>(n, a, b);
    std::cout << "  batch size " << n << ": rule " << model.getBatchStrategy().getRule(n).toString() << std::endl;
    TEST_CHECK(verify(n, sum, t10));
    TEST_CHECK(MockModel::log.paddingZero);
    // the evaluated sizes are exactly the rule's sizes
    const auto& sizes = model.getBatchStrategy().getRule(n).getSizes();
    TEST_CHECK(MockModel::log.runs.size() == sizes.size());
    TEST_CHECK(std::equal(sizes.begin(), sizes.end(), MockModel::log.runs.begin(),
                          [](std::size_t s, int r) { return s == static_cast<std::size_t>(r); }));

    // flat path, same numbers
    std::vector<std::int32_t> fa;
    std::vector<std::int64_t> fb;
    for (const auto& row : a) fa.insert(fa.end(), row.begin(), row.end());
    for (const auto& row : b) fb.insert(fb.end(), row.begin(), row.end());
    std::vector<double> fsum(static_cast<std::size_t>(n), -1.0);
    std::vector<std::int64_t> ft10(2 * static_cast<std::size_t>(n), -1);
    MockModel::log = MockLog();
    MockModel::log.expectRows = static_cast<std::size_t>(n);
    model.runFlat(n, {fa, fb}, {fsum, ft10});
    TEST_CHECK(verify(n, nest(fsum, static_cast<std::size_t>(n)), nest(ft10, static_cast<std::size_t>(n))));
    TEST_CHECK(MockModel::log.paddingZero);
  }
  TEST_CHECK(model.getBatchStrategy().getRule(1).toString() == "1:2");        // smallest size, padded
  TEST_CHECK(model.getBatchStrategy().getRule(3).toString() == "3:3");        // exact
  TEST_CHECK(model.getBatchStrategy().getRule(5).toString() == "5:2,2,2");    // smallest size repeated
  TEST_CHECK(model.getBatchStrategy().getRule(8).toString() == "8:2,2,2,2");  // no padding

  // rules with sizes the model was not compiled for
  EXPECT_THROW(std::invalid_argument, model.setBatchRule("4:4"), "uses batch size 4, but model 'mock' was compiled");
  EXPECT_THROW(std::invalid_argument, model.setBatchRule(5, {1, 4}), "uses batch size 1");
  tfaot::BatchStrategy bad;
  bad.setRule(tfaot::BatchRule("6:3,3"));
  bad.setRule(tfaot::BatchRule("7:4,3"));
  EXPECT_THROW(std::invalid_argument, model.setBatchStrategy(bad), "uses batch size 4");
  TEST_CHECK(model.getBatchStrategy().hasRule(5));  // unchanged
  bad.removeRule(7);
  model.setBatchStrategy(bad);
  TEST_CHECK(!model.getBatchStrategy().hasRule(5));
  TEST_CHECK(model.getBatchStrategy().hasRule(6));

  // batch size 0: empty outputs, nothing evaluated
  {
    MockModel::log = MockLog();
    tfaot::DoubleArrays sum;
    tfaot::Int64Arrays t10;
    std::tie(sum, t10) =
        model.run<tfaot::DoubleArrays, tfaot::Int64Arrays>(0, tfaot::Int32Arrays(), tfaot::Int64Arrays());
    TEST_CHECK(sum.empty() && t10.empty());
    TEST_CHECK(MockModel::log.runs.empty());
    TEST_CHECK(!model.getBatchStrategy().hasRule(0));
  }

  // an invalid default rule of a package is reported at construction
  MockModel::rules = {"4:1,3"};
  EXPECT_THROW(std::logic_error, tfaot::Model<MockModel>(), "default batch rule '4:1,3' of model 'mock' is invalid");
  MockModel::rules = {"4:2,3"};
}

// ---------------------------------------------------------------------------
// simple model

static void testSimple() {
  std::cout << "\n== simple" << std::endl;
  tfaot::Model<tfaot_model::simple> model;
  std::cout << "  " << model.summary() << std::endl;

  // description
  TEST_CHECK(model.name() == "simple");
  TEST_CHECK(model.package() == "tfaot-model-simple");
  TEST_CHECK((model.batchSizes() == std::vector<std::size_t>{1, 2, 4}));
  TEST_CHECK(model.nInputs() == 1 && model.nOutputs() == 1);
  TEST_CHECK((model.inputNames() == std::vector<std::string>{"input_0"}));
  TEST_CHECK((model.outputNames() == std::vector<std::string>{"output_0"}));
  TEST_CHECK((model.inputShapes() == std::vector<std::vector<std::int64_t>>{{4}}));
  TEST_CHECK((model.outputShapes() == std::vector<std::vector<std::int64_t>>{{2}}));
  TEST_CHECK(model.inputDTypes()[0] == tfaot::DType::Float);
  TEST_CHECK(model.outputDTypes()[0] == tfaot::DType::Float);
  TEST_CHECK(model.input(0).toString() == "input_0: float32[4]");
  TEST_CHECK(model.input(0).rowSize == 4);
  TEST_CHECK(model.inputIndex("input_0") == 0);
  TEST_CHECK(model.outputIndex("output_0") == 0);
  EXPECT_THROW(std::invalid_argument, model.inputIndex("x"), "has no input named 'x' (its inputs: input_0)");
  EXPECT_THROW(std::out_of_range, model.output(1), "index 1 is out of range");
  TEST_CHECK(model.getBatchStrategy().nRules() == 0);  // rendered without default rules

  // batch rules, set by both forms
  model.setBatchRule(1, {1});
  model.setBatchRule(3, {2, 2}, 1);
  model.setBatchRule("5:2,2,2");
  TEST_CHECK(model.getBatchStrategy().hasRule(1));
  TEST_CHECK(model.getBatchStrategy().getRule(1).nSizes() == 1);
  TEST_CHECK(model.getBatchStrategy().getRule(1).getLastPadding() == 0);
  TEST_CHECK(!model.getBatchStrategy().hasRule(2));
  TEST_CHECK(model.getBatchStrategy().hasRule(3));
  TEST_CHECK(model.getBatchStrategy().getRule(3).nSizes() == 2);
  TEST_CHECK(model.getBatchStrategy().getRule(3).getLastPadding() == 1);
  TEST_CHECK(!model.getBatchStrategy().hasRule(4));
  TEST_CHECK(model.getBatchStrategy().hasRule(5));
  TEST_CHECK(model.getBatchStrategy().getRule(5).nSizes() == 3);
  TEST_CHECK(model.getBatchStrategy().getRule(5).getLastPadding() == 1);
  {
    // the string and the explicit form give the same rules
    tfaot::Model<tfaot_model::simple> other;
    other.setBatchRule("1:1");
    other.setBatchRule("3:2,2");
    other.setBatchRule(5, {2, 2, 2}, 1);
    for (int t : {1, 3, 5}) {
      TEST_CHECK(other.getBatchStrategy().getRule(t) == model.getBatchStrategy().getRule(t));
    }
  }

  // rules must be valid and use compiled batch sizes only
  EXPECT_THROW(std::invalid_argument, model.setBatchRule("6:3,3"),
               "uses batch size 3, but model 'simple' was compiled for batch sizes 1,2,4 only");
  EXPECT_THROW(std::invalid_argument, model.setBatchRule(8, {8}), "uses batch size 8");
  EXPECT_THROW(std::invalid_argument, model.setBatchRule("5:1"), "less than the target batch size");
  EXPECT_THROW(std::invalid_argument, model.setBatchRule("5"), "missing ':'");
  EXPECT_THROW(std::invalid_argument, model.setBatchRule(3, {2, 2}), "cover 4 rows");
  TEST_CHECK(!model.getBatchStrategy().hasRule(6));
  TEST_CHECK(!model.getBatchStrategy().hasRule(8));

  // the example of the CMS documentation
  {
    tfaot::FloatArrays input = {{0, 1, 2, 3}};
    tfaot::FloatArrays output;
    std::tie(output) = model.run<tfaot::FloatArrays>(1, input);
    TEST_CHECK(output.size() == 1 && output[0].size() == 2);
    std::cout << "  output[0]: " << output[0][0] << ", " << output[0][1] << std::endl;
    TEST_CHECK(std::fabs(output[0][0] - 0.648093f) < 1e-5f);
    TEST_CHECK(std::fabs(output[0][1] - 0.351907f) < 1e-5f);
  }

  // TensorFlow's reference numbers; batch sizes 1 (rule 1:1), 2 (default rule,
  // created on demand), 3 (rule 3:2,2), 4 (default), 7 (default 7:1,...)
  auto compare = [&](int bs, const char* label) {
    const std::size_t n = static_cast<std::size_t>(bs);
    tfaot::FloatArrays input = nest(readFlat<float>(refPath(simpleRef, bs, "input", 0)), n);
    tfaot::FloatArrays want = nest(readFlat<float>(refPath(simpleRef, bs, "output", 0)), n);
    tfaot::FloatArrays output;
    std::tie(output) = model.run<tfaot::FloatArrays>(bs, input);
    const bool ok = allClose(output, want);
    std::cout << "  batch size " << bs << " (rule " << model.getBatchStrategy().getRule(bs).toString() << ", " << label
              << "): " << (ok ? "matches TensorFlow" : "MISMATCH") << std::endl;
    TEST_CHECK(ok);
  };
  compare(1, "explicit");
  TEST_CHECK(!model.getBatchStrategy().hasRule(2));
  compare(2, "default");
  TEST_CHECK(model.getBatchStrategy().hasRule(2));                      // created on demand
  TEST_CHECK(model.getBatchStrategy().getRule(2).toString() == "2:2");  // exact compiled size
  compare(3, "explicit, padded");
  TEST_CHECK(!model.getBatchStrategy().hasRule(4));  // still none for 4
  compare(4, "default");
  TEST_CHECK(model.getBatchStrategy().getRule(4).toString() == "4:4");
  compare(7, "default");
  TEST_CHECK(model.getBatchStrategy().getRule(7).toString() == "7:1,1,1,1,1,1,1");
  model.setBatchRule("7:4,4");
  compare(7, "explicit, padded");
  model.setBatchRule("7:2,4,2");
  compare(7, "explicit, padded, mixed");
  compare(3, "explicit, padded, after others");  // stale rows in the bs 2 buffers

  // batch size 5 with rule 5:2,2,2: rows are independent, so the first 5 rows of bs 7
  {
    const std::vector<float> in7 = readFlat<float>(refPath(simpleRef, 7, "input", 0));
    const std::vector<float> out7 = readFlat<float>(refPath(simpleRef, 7, "output", 0));
    tfaot::FloatArrays input = nest(std::vector<float>(in7.begin(), in7.begin() + 20), 5);
    tfaot::FloatArrays want = nest(std::vector<float>(out7.begin(), out7.begin() + 10), 5);
    tfaot::FloatArrays output;
    std::tie(output) = model.run<tfaot::FloatArrays>(5, input);
    TEST_CHECK(allClose(output, want));
  }

  // batch size 0
  {
    tfaot::FloatArrays output = std::get<0>(model.run<tfaot::FloatArrays>(0, tfaot::FloatArrays()));
    TEST_CHECK(output.empty());
  }

  // input validation: nothing is evaluated, clear messages
  {
    tfaot::FloatArrays two = {{0, 1, 2, 3}, {4, 5, 6, 7}};
    tfaot::FloatArrays shortRow = {{0, 1, 2, 3}, {4, 5, 6}};
    tfaot::FloatArrays longRow = {{0, 1, 2, 3, 4}, {4, 5, 6, 7}};
    EXPECT_THROW(std::invalid_argument, model.run<tfaot::FloatArrays>(2),
                 "model 'simple' received 0 inputs, but it has 1 (input_0)");
    EXPECT_THROW(std::invalid_argument, model.run<tfaot::FloatArrays>(2, two, two),
                 "model 'simple' received 2 inputs, but it has 1");
    EXPECT_THROW(std::invalid_argument, model.run<tfaot::FloatArrays>(3, two),
                 "input 0 ('input_0') of model 'simple' has 2 rows, but the batch size is 3");
    EXPECT_THROW(std::invalid_argument, model.run<tfaot::FloatArrays>(1, two), "has 2 rows, but the batch size is 1");
    EXPECT_THROW(std::invalid_argument, model.run<tfaot::FloatArrays>(2, shortRow),
                 "row 1 has 3 elements, but input_0: float32[4] needs 4 per row");
    EXPECT_THROW(std::invalid_argument, model.run<tfaot::FloatArrays>(2, longRow), "row 0 has 5 elements");
    EXPECT_THROW(std::invalid_argument, model.run<tfaot::FloatArrays>(-1, tfaot::FloatArrays()), "negative batch size");
  }

  // flat fast path
  for (int bs : {1, 3, 7}) {
    const std::size_t n = static_cast<std::size_t>(bs);
    const std::vector<float> input = readFlat<float>(refPath(simpleRef, bs, "input", 0));
    const std::vector<float> want = readFlat<float>(refPath(simpleRef, bs, "output", 0));
    std::vector<float> output(n * 2, -1.0f);
    model.runFlat(bs, {input}, {output});
    TEST_CHECK(allCloseFlat(output, want));
    // pointer + count form, into a larger buffer
    std::vector<float> big(n * 2 + 3, -1.0f);
    model.runFlat(bs, {tfaot::InputSpan(input.data(), input.size())}, {tfaot::OutputSpan(big.data() + 1, n * 2)});
    TEST_CHECK(
        allCloseFlat(std::vector<float>(big.begin() + 1, big.begin() + 1 + static_cast<std::ptrdiff_t>(n * 2)), want));
    TEST_CHECK(big[0] == -1.0f && big[n * 2 + 1] == -1.0f);
  }
  {
    std::vector<float> in(8), out(4), outShort(3);
    std::vector<double> inDouble(8);
    std::array<float, 8> inArray{};
    model.runFlat(2, {inArray}, {out});
    EXPECT_THROW(std::invalid_argument, model.runFlat(2, {}, {out}), "received 0 input buffers, but it has 1 inputs");
    EXPECT_THROW(std::invalid_argument, model.runFlat(2, {in, in}, {out}), "received 2 input buffers");
    EXPECT_THROW(std::invalid_argument, model.runFlat(2, {in}, {}), "received 0 output buffers");
    EXPECT_THROW(std::invalid_argument, model.runFlat(3, {in}, {out}),
                 "input 0 ('input_0') of model 'simple': got 8 elements, but batch size 3 of input_0: float32[4] needs "
                 "12");
    EXPECT_THROW(std::invalid_argument, model.runFlat(2, {in}, {outShort}),
                 "output 0 ('output_0') of model 'simple': got 3");
    EXPECT_THROW(std::invalid_argument, model.runFlat(2, {inDouble}, {out}),
                 "got a float64 buffer, but input_0: float32[4] needs float32");
    EXPECT_THROW(std::invalid_argument,
                 model.runFlat(2, {tfaot::InputSpan(static_cast<const float*>(nullptr), 8)}, {out}), "null buffer");
    EXPECT_THROW(std::invalid_argument, model.runFlat(-2, {in}, {out}), "negative batch size");
  }

  // models are movable (e.g. into a std::optional or a member)
  {
    tfaot::Model<tfaot_model::simple> moved = std::move(model);
    TEST_CHECK(moved.getBatchStrategy().hasRule(5));
    tfaot::FloatArrays output;
    std::tie(output) = moved.run<tfaot::FloatArrays>(1, tfaot::FloatArrays{{0, 1, 2, 3}});
    TEST_CHECK(std::fabs(output[0][0] - 0.648093f) < 1e-5f);
  }

  // the wrapper itself rejects batch sizes it was not compiled for
  {
    tfaot_model::simple wrapper;
    EXPECT_THROW(std::invalid_argument, wrapper.run(3), "was not compiled for batch size 3 (compiled: 1,2,4)");
    EXPECT_THROW(std::invalid_argument, wrapper.argData(1, 1), "has 1 inputs, index 1 is out of range");
  }
}

// ---------------------------------------------------------------------------
// multi model: two inputs and two outputs of mixed types

static void testMulti() {
  std::cout << "\n== multi" << std::endl;
  tfaot::Model<tfaot_model::multi> model;
  std::cout << "  " << model.summary() << std::endl;

  TEST_CHECK((model.inputNames() == std::vector<std::string>{"input_0", "input_1"}));
  TEST_CHECK((model.outputNames() == std::vector<std::string>{"output_0", "output_1"}));
  TEST_CHECK(model.input(1).dtype == tfaot::DType::Double);
  TEST_CHECK(model.output(1).dtype == tfaot::DType::Bool);
  TEST_CHECK(model.inputIndex("input_1") == 1);
  TEST_CHECK(model.outputIndex("output_1") == 1);

  // the package's default rule is in place, other sizes are not
  TEST_CHECK(model.getBatchStrategy().hasRule(3));
  TEST_CHECK(model.getBatchStrategy().getRule(3).toString() == "3:2,2");
  TEST_CHECK(!model.getBatchStrategy().hasRule(2));

  auto compare = [&](int bs) {
    const std::size_t n = static_cast<std::size_t>(bs);
    tfaot::FloatArrays in0 = nest(readFlat<float>(refPath(multiRef, bs, "input", 0)), n);
    tfaot::DoubleArrays in1 = nest(readFlat<double>(refPath(multiRef, bs, "input", 1)), n);
    tfaot::FloatArrays want0 = nest(readFlat<float>(refPath(multiRef, bs, "output", 0)), n);
    tfaot::BoolArrays want1 = nest(readBools(refPath(multiRef, bs, "output", 1)), n);
    tfaot::FloatArrays out0;
    tfaot::BoolArrays out1;
    std::tie(out0, out1) = model.run<tfaot::FloatArrays, tfaot::BoolArrays>(bs, in0, in1);
    bool ok = allClose(out0, want0) && out1.size() == n;
    for (std::size_t r = 0; ok && r < n; r++) {
      ok = out1[r].size() == 2;
      for (std::size_t j = 0; ok && j < 2; j++) {
        // a flipped comparison is tolerated only right at the threshold
        ok = out1[r][j] == want1[r][j] || std::fabs(want0[r][j] - 0.5f) < 1e-5f;
      }
    }
    std::cout << "  batch size " << bs << " (rule " << model.getBatchStrategy().getRule(bs).toString()
              << "): " << (ok ? "matches TensorFlow" : "MISMATCH") << std::endl;
    TEST_CHECK(ok);

    // flat path: bool output into a plain bool array
    std::vector<float> f0 = readFlat<float>(refPath(multiRef, bs, "input", 0));
    std::vector<double> f1 = readFlat<double>(refPath(multiRef, bs, "input", 1));
    std::vector<float> o0(n * 2);
    std::unique_ptr<bool[]> o1(new bool[n * 2]);
    model.runFlat(bs, {f0, f1}, {o0, tfaot::OutputSpan(o1.get(), n * 2)});
    bool flatOk = allCloseFlat(o0, readFlat<float>(refPath(multiRef, bs, "output", 0)));
    for (std::size_t i = 0; i < n * 2; i++) {
      flatOk = flatOk && o1[i] == out1[i / 2][i % 2];
    }
    TEST_CHECK(flatOk);
  };
  compare(2);
  TEST_CHECK(model.getBatchStrategy().hasRule(2));  // created on demand
  compare(1);
  compare(3);
  compare(4);
  compare(7);
  model.setBatchRule("3:1,1,1");  // the package default is overridable
  compare(3);
  model.setBatchRule("7:4,4");
  compare(7);

  // input validation with several inputs
  {
    tfaot::FloatArrays in0 = {{0, 1, 2, 3}, {4, 5, 6, 7}};
    tfaot::DoubleArrays in1 = {{0, 1, 2, 3}, {4, 5, 6, 7}};
    tfaot::DoubleArrays in1Short = {{0, 1, 2, 3}};
    tfaot::DoubleArrays in1Narrow = {{0, 1, 2, 3}, {4, 5}};
    using O0 = tfaot::FloatArrays;
    using O1 = tfaot::BoolArrays;
    EXPECT_THROW(std::invalid_argument, (model.run<O0, O1>(2, in0)),
                 "received 1 inputs, but it has 2 (input_0, input_1)");
    EXPECT_THROW(std::invalid_argument, (model.run<O0, O1>(2, in0, in1, in1)), "received 3 inputs");
    EXPECT_THROW(std::invalid_argument, (model.run<O0, O1>(2, in0, in1Short)),
                 "input 1 ('input_1') of model 'multi' has 1 rows, but the batch size is 2");
    EXPECT_THROW(std::invalid_argument, (model.run<O0, O1>(2, in0, in1Narrow)),
                 "input 1 ('input_1') of model 'multi': row 1 has 2 elements, but input_1: float64[4] needs 4");
    std::vector<float> f0(8), o0(4);
    std::vector<double> f1(8);
    std::unique_ptr<bool[]> o1(new bool[4]);
    EXPECT_THROW(std::invalid_argument, model.runFlat(2, {f1, f0}, {o0, tfaot::OutputSpan(o1.get(), 4)}),
                 "input 0 ('input_0') of model 'multi': got a float64 buffer");
    EXPECT_THROW(std::invalid_argument, model.runFlat(2, {f0, f1}, {o0, o0}),
                 "output 1 ('output_1') of model 'multi': got a float32 buffer, but output_1: bool[2] needs bool");
  }
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " SIMPLE_REF_DIR MULTI_REF_DIR" << std::endl;
    return 2;
  }
  simpleRef = argv[1];
  multiRef = argv[2];
  try {
    testBatchRule();
    testBatchStrategy();
    testMock();
    testSimple();
    testMulti();
  } catch (const std::exception& e) {
    std::cerr << "unexpected exception: " << e.what() << std::endl;
    return 1;
  }
  std::cout << "\n" << nChecks << " checks, " << nFailures << " failures" << std::endl;
  return nFailures == 0 ? 0 : 1;
}
