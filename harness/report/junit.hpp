#pragma once
// JUnit XML for CI dashboards: one <testcase> per control. A control that misses its YAML
// expectation is a <failure> with the mismatches; a case without an expectation fails when
// its verdict is FAIL; a harness ERROR is an <error>. Validates against docs/junit.xsd (the
// Jenkins/Ant form CI dashboards read).
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "harness/engine/case_result.hpp"
#include "harness/report/control_view.hpp"
#include "harness/runner/sink.hpp"

namespace kcert::report {

// `controls`: the typed view of each result (control_view.hpp). `suite`: the <testsuite> name.
std::string junit_xml(const std::vector<ControlView>& controls, const std::string& suite, const std::string& timestamp);

// The same from result documents (docs/results.md), through control_views.
std::string junit_xml(const std::vector<nlohmann::json>& documents, const std::string& suite, const std::string& timestamp);

// Writes it (checked, store::write_text_file).
void write_junit(const std::string& path, const std::vector<nlohmann::json>& documents, const std::string& suite);

// A sink (runner/sink.hpp) that writes the run's JUnit file when it ends: `--junit` on run
// and suite.
class JunitSink : public runner::ResultSink {
 public:
  JunitSink(std::string path, std::string suite) : path_(std::move(path)), suite_(std::move(suite)) {}
  void run_finished(const std::vector<engine::CaseResult>& results) override;

 private:
  std::string path_;
  std::string suite_;
};

}  // namespace kcert::report
