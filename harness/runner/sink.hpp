#pragma once
// Where a run's results go while it runs (issue 51): one interface that every destination
// implements (the console's progress lines, run storage's spool and PostgreSQL, a JSON file,
// JUnit), composed by the runner the way pytest composes its reporters: run_cases hands each
// event to every sink, in the order the caller lists them. A command picks its sinks from its
// flags; it does not call each destination itself.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "harness/contract/test_case.hpp"
#include "harness/engine/case_result.hpp"
#include "harness/engine/engine.hpp"

namespace kcert::runner {

class ResultSink {
 public:
  virtual ~ResultSink() = default;
  // Before the first case: the cases this run will run, in order.
  virtual void run_started(const std::vector<contract::TestCase>& cases) {}
  virtual void case_started(std::size_t index, std::size_t total) {}
  // While a case runs (replicates done so far); called from the thread that runs the case, and
  // under fork isolation from the forked child (what a sink changes there stays there; a
  // spawned worker reports none).
  virtual void progress(const engine::Progress& p) {}
  // After each case, with every result so far (the newest last): an interrupted run keeps
  // what each sink has written by then.
  virtual void case_finished(const std::vector<engine::CaseResult>& done) {}
  // After the last case, with every result, when the run was not ended by an exception.
  virtual void run_finished(const std::vector<engine::CaseResult>& results) {}
};

using Sinks = std::vector<ResultSink*>;

// Writes a JSON document of the results so far to a file after each case (checked,
// store::write_json_file): `kcert run --json` and `kcert suite --json`.
class JsonFileSink : public ResultSink {
 public:
  using Document = std::function<nlohmann::json(const std::vector<engine::CaseResult>&)>;
  JsonFileSink(std::string path, Document document) : path_(std::move(path)), document_(std::move(document)) {}
  void case_finished(const std::vector<engine::CaseResult>& done) override;

 private:
  std::string path_;
  Document document_;
};

}  // namespace kcert::runner
