#include "harness/report/junit.hpp"
#include "harness/text/escape.hpp"

#include "harness/stats/format.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>

#include "harness/report/control_view.hpp"
#include "harness/store/json.hpp"
#include "harness/store/spool.hpp"

namespace kcert::report {

namespace {
using text::xml_escape;
}  // namespace

std::string junit_xml(const std::vector<ControlView>& controls, const std::string& suite, const std::string& timestamp) {
  int failures = 0, errors = 0, skipped = 0;
  double total = 0;
  std::string cases;
  for (const auto& c : controls) {
    total += c.seconds;
    cases += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\">\n",
                         xml_escape("kcert." + c.kind + "." + c.family), xml_escape(c.id), c.seconds);
    std::string reasons;
    for (const auto& g : c.gates) reasons += fmt::format("{} {}: {}\n", g.gate, g.verdict, g.reason);
    // A variance PASS resting on less than the horizon says so where the verdict is read
    // (issue 32), not only in the report's footnote.
    std::string shown = c.verdict;
    if (const auto h = c.variance_short_of_horizon)
      shown += " (variance PASS short of the horizon: the evidence supports " +
               (std::isnan(*h) ? std::string("fewer") : stats::format_number(*h)) + " replicates)";
    if (c.skipped) {
      // A control this build cannot run (a newer LibTorch's kernel): a skipped test, not a pass.
      ++skipped;
      cases += fmt::format("      <skipped message=\"{}\"/>\n", xml_escape(*c.skipped));
    } else if (c.error) {
      ++errors;
      cases += fmt::format("      <error message=\"{}\" type=\"harness error\">{}</error>\n", xml_escape(*c.error),
                           xml_escape(*c.error));
    } else if (!c.unexpected.empty()) {
      ++failures;
      std::string what;
      for (const auto& u : c.unexpected) what += (what.empty() ? "" : "; ") + u;
      cases += fmt::format("      <failure message=\"{}\" type=\"expectation\">{}</failure>\n",
                           xml_escape("verdicts differ from the YAML expectation: " + what), xml_escape(reasons));
    } else if (!c.has_expectation && c.verdict == "FAIL") {
      ++failures;
      cases += fmt::format("      <failure message=\"FAIL\" type=\"verdict\">{}</failure>\n", xml_escape(reasons));
    } else if (!c.has_expectation && c.verdict == "INCONCLUSIVE") {
      // Certified nothing (issue 32): as the exit status, a failure a CI view shows, of its own type.
      ++failures;
      cases += fmt::format("      <failure message=\"INCONCLUSIVE: too few replicates to see an effect at a gate's floor\" "
                           "type=\"inconclusive\">{}</failure>\n",
                           xml_escape(reasons));
    }
    cases += fmt::format("      <system-out>{}</system-out>\n    </testcase>\n", xml_escape("verdict " + shown + "\n" + reasons));
  }
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"kcert\" tests=\"{0}\" failures=\"{1}\" errors=\"{2}\" "
      "time=\"{3:.3f}\">\n  <testsuite name=\"{4}\" tests=\"{0}\" failures=\"{1}\" errors=\"{2}\" skipped=\"{7}\" time=\"{3:.3f}\" "
      "timestamp=\"{5}\">\n{6}  </testsuite>\n</testsuites>\n",
      controls.size(), failures, errors, total, xml_escape(suite), xml_escape(timestamp), cases, skipped);
}

std::string junit_xml(const std::vector<nlohmann::json>& documents, const std::string& suite, const std::string& timestamp) {
  return junit_xml(control_views(documents), suite, timestamp);
}

void write_junit(const std::string& path, const std::vector<nlohmann::json>& documents, const std::string& suite) {
  auto ts = store::utc_now_iso();
  if (!ts.empty() && ts.back() == 'Z') ts.pop_back();  // xs:dateTime without a zone, as JUnit readers expect
  store::write_text_file(path, junit_xml(documents, suite, ts));
}

void JunitSink::run_finished(const std::vector<engine::CaseResult>& results) {
  std::vector<nlohmann::json> docs;
  docs.reserve(results.size());
  for (const auto& r : results) docs.push_back(store::to_json(r));
  write_junit(path_, docs, suite_);
}

}  // namespace kcert::report
