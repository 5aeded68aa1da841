// The runner room (issue 51): a suite run as functions whose policy is a value, not a global.
#include "tests/catch_torch.hpp"

#include <filesystem>
#include <fstream>

#include "harness/kernels/registry.hpp"
#include "harness/runner/errors.hpp"
#include "harness/runner/suite.hpp"
#include "harness/store/json.hpp"

namespace {

const std::string kN2 = std::string(KCERT_SOURCE_DIR) + "/testcases/negative/rmsnorm/n2_gemma_rmsnorm_missing_offset.yaml";
const std::string kN6 = std::string(KCERT_SOURCE_DIR) + "/testcases/negative/rmsnorm/n6_norm_eps_placement.yaml";

kcert::kernels::Registry builtin_registry() {
  kcert::kernels::Registry registry;
  kcert::kernels::register_builtin_families(registry);
  return registry;
}

// A result's document without how the run went (threads, batch, seconds): what must be the
// same bits wherever the case ran.
std::string measured(const kcert::engine::CaseResult& r) {
  auto j = kcert::store::to_json(r);
  j.erase("runtime");
  return j.dump();
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/kcert-runner-test.XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

TEST_CASE("the policy decides whether a case file may load a plugin, per call", "[runner]") {
  auto registry = builtin_registry();
  TempDir dir;
  {
    std::ifstream in(kN2);
    std::ofstream out(dir.path / "with_plugin.yaml");
    out << in.rdbuf() << "plugins: [./not-there.so]\n";
  }
  const std::vector<std::string> paths{(dir.path / "with_plugin.yaml").string()};
  kcert::runner::SuitePolicy strict;
  CHECK_THROWS_WITH(kcert::runner::load_cases(paths, registry, "smoke", strict, nullptr),
                    Catch::Contains("a case file does not load code on its own"));
  // The same call under a trusting policy goes on to load the library (which is not there).
  kcert::runner::SuitePolicy trusting;
  trusting.allow_case_plugins = true;
  CHECK_THROWS_WITH(kcert::runner::load_cases(paths, registry, "smoke", trusting, nullptr),
                    !Catch::Contains("a case file does not load code on its own"));
  // With a failure list, the file is listed and the others load.
  std::vector<kcert::runner::LoadFailure> failures;
  const auto cases = kcert::runner::load_cases({paths.front(), kN6}, registry, "smoke", strict, nullptr, &failures);
  REQUIRE(cases.size() == 1);
  CHECK(cases.front().id == "n6_norm_eps_placement");
  REQUIRE(failures.size() == 1);
  CHECK(failures.front().file == paths.front());
  const auto error = kcert::runner::load_failure_result(failures.front());
  CHECK(error.testcase.id == paths.front());
  CHECK_THAT(error.error, Catch::StartsWith("cannot load the case file: "));
}

TEST_CASE("the memory limit is the policy's, named in the refusal", "[runner]") {
  auto registry = builtin_registry();
  kcert::runner::SuitePolicy tight;
  tight.memory = {1024.0, "a test's limit"};
  CHECK_THROWS_WITH(kcert::runner::load_cases({kN2}, registry, "smoke", tight, nullptr),
                    Catch::Contains("more than the memory limit") && Catch::Contains("(a test's limit;"));
  kcert::runner::SuitePolicy roomy;
  roomy.memory = {1e12, "a test's limit"};
  CHECK(kcert::runner::load_cases({kN2}, registry, "smoke", roomy, nullptr).size() == 1);
  CHECK_THROWS_AS(kcert::runner::load_cases({kN2}, registry, "no-such-profile", roomy, nullptr), kcert::runner::UsageError);
}

namespace {
// Writes down each event a sink sees, tagged with the sink's name.
class RecordingSink : public kcert::runner::ResultSink {
 public:
  RecordingSink(std::string name, std::vector<std::string>& events) : name_(std::move(name)), events_(events) {}
  void run_started(const std::vector<kcert::contract::TestCase>& cases) override {
    events_.push_back(name_ + " start " + std::to_string(cases.size()));
  }
  void case_started(std::size_t index, std::size_t total) override {
    events_.push_back(name_ + " case " + std::to_string(index) + "/" + std::to_string(total));
  }
  void progress(const kcert::engine::Progress& p) override { ++progress_calls; }
  void case_finished(const std::vector<kcert::engine::CaseResult>& done) override {
    events_.push_back(name_ + " result " + std::to_string(done.size()) + " " + done.back().testcase.id);
  }
  void run_finished(const std::vector<kcert::engine::CaseResult>& results) override {
    events_.push_back(name_ + " end " + std::to_string(results.size()));
  }
  int progress_calls = 0;

 private:
  std::string name_;
  std::vector<std::string>& events_;
};
}  // namespace

TEST_CASE("a case gives the same document in process, in a forked child and in a spawned worker, and sinks see each event in order", "[runner]") {
  auto registry = builtin_registry();
  kcert::runner::SuitePolicy policy;
  policy.memory = {1e12, "test"};
  const auto cases = kcert::runner::load_cases({kN2, kN6}, registry, "smoke", policy, nullptr);
  REQUIRE(cases.size() == 2);
  std::vector<std::string> events;
  RecordingSink first("a", events), second("b", events);
  kcert::engine::RunOptions options;
  policy.isolation.mode = kcert::runner::Isolation::Mode::none;
  const auto in_process = kcert::runner::run_cases(cases, registry, options, policy, {&first, &second});
  const auto id0 = cases[0].id, id1 = cases[1].id;
  CHECK(events == std::vector<std::string>{"a start 2", "b start 2", "a case 0/2", "b case 0/2", "a result 1 " + id0,
                                           "b result 1 " + id0, "a case 1/2", "b case 1/2", "a result 2 " + id1,
                                           "b result 2 " + id1, "a end 2", "b end 2"});
  // Progress reaches every sink, as often.
  CHECK(first.progress_calls > 0);
  CHECK(first.progress_calls == second.progress_calls);
  policy.isolation.mode = kcert::runner::Isolation::Mode::all;
  const auto forked = kcert::runner::run_cases(cases, registry, options, policy, {});
  // The spawn strategy: a fresh kcert worker that rebuilds each case from its text.
  policy.isolation.process = kcert::runner::Isolation::Process::spawn;
  policy.isolation.worker = {KCERT_BINARY};
  const auto spawned = kcert::runner::run_cases(cases, registry, options, policy, {});
  REQUIRE(in_process.size() == 2);
  REQUIRE(forked.size() == 2);
  REQUIRE(spawned.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    INFO(cases[i].id);
    CHECK(in_process[i].error.empty());
    CHECK(forked[i].error.empty());
    CHECK(spawned[i].error == "");
    const auto expected = measured(in_process[i]);
    CHECK(measured(forked[i]) == expected);
    CHECK(measured(spawned[i]) == expected);
  }
  // A worker that cannot start is the case's ERROR, not the run's end.
  policy.isolation.worker = {"/nonexistent/kcert"};
  const auto missing = kcert::runner::run_cases({cases.front()}, registry, options, policy, {});
  REQUIRE(missing.size() == 1);
  CHECK_THAT(missing.front().error, Catch::Contains("cannot start the worker /nonexistent/kcert"));
}
