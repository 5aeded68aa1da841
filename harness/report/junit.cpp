#include "harness/report/junit.hpp"
#include "harness/text/escape.hpp"

#include "eval/falsifiability.hpp"
#include "harness/stats/format.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>

#include "harness/store/json.hpp"
#include "harness/store/spool.hpp"

namespace kcert::report {

namespace {
using text::xml_escape;

std::string str(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : "";
}
}  // namespace

std::string junit_xml(const std::vector<nlohmann::json>& documents, const std::string& suite, const std::string& timestamp) {
  int failures = 0, errors = 0, skipped = 0;
  double total = 0;
  std::string cases;
  for (const auto& d : documents) {
    const double seconds = d.value("runtime", nlohmann::json::object()).value("seconds", 0.0);
    total += seconds;
    cases += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\">\n",
                         xml_escape("kcert." + str(d, "kind") + "." + str(d, "family")), xml_escape(str(d, "id")), seconds);
    const std::string verdict = str(d, "verdict");
    const auto unexpected = d.value("unexpected", nlohmann::json::array());
    const bool has_expectation = d.contains("expected") && d.at("expected").is_object() && !d.at("expected").empty();
    std::string reasons;
    if (d.contains("gates")) {
      for (const char* g : {"algebra", "bias", "variance"}) {
        const auto& gate = d.at("gates").value(g, nlohmann::json::object());
        reasons += fmt::format("{} {}: {}\n", g, str(gate, "verdict"), str(gate, "reason"));
      }
    }
    // A variance PASS resting on less than the horizon says so where the verdict is read
    // (issue 32), not only in the report's footnote.
    std::string shown = verdict;
    if (d.contains("gates") && d.at("gates").is_object()) {
      if (const auto h = eval::variance_pass_short_of_horizon(d.at("gates").value("variance", nlohmann::json::object())))
        shown += " (variance PASS short of the horizon: the evidence supports " +
                 (std::isnan(*h) ? std::string("fewer") : stats::format_number(*h)) + " replicates)";
    }
    if (d.contains("skipped") && d.at("skipped").is_string()) {
      // A control this build cannot run (a newer LibTorch's kernel): a skipped test, not a pass.
      ++skipped;
      cases += fmt::format("      <skipped message=\"{}\"/>\n", xml_escape(str(d, "skipped")));
    } else if (d.contains("error") && d.at("error").is_string()) {
      ++errors;
      cases += fmt::format("      <error message=\"{}\" type=\"harness error\">{}</error>\n", xml_escape(str(d, "error")),
                           xml_escape(str(d, "error")));
    } else if (!unexpected.empty()) {
      ++failures;
      std::string what;
      for (const auto& u : unexpected) what += (what.empty() ? "" : "; ") + (u.is_string() ? u.get<std::string>() : u.dump());
      cases += fmt::format("      <failure message=\"{}\" type=\"expectation\">{}</failure>\n",
                           xml_escape("verdicts differ from the YAML expectation: " + what), xml_escape(reasons));
    } else if (!has_expectation && verdict == "FAIL") {
      ++failures;
      cases += fmt::format("      <failure message=\"FAIL\" type=\"verdict\">{}</failure>\n", xml_escape(reasons));
    } else if (!has_expectation && verdict == "INCONCLUSIVE") {
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
      documents.size(), failures, errors, total, xml_escape(suite), xml_escape(timestamp), cases, skipped);
}

void write_junit(const std::string& path, const std::vector<nlohmann::json>& documents, const std::string& suite) {
  auto ts = store::utc_now_iso();
  if (!ts.empty() && ts.back() == 'Z') ts.pop_back();  // xs:dateTime without a zone, as JUnit readers expect
  store::write_text_file(path, junit_xml(documents, suite, ts));
}

}  // namespace kcert::report
