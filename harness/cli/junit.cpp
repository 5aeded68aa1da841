#include "harness/cli/junit.hpp"

#include <fmt/format.h>

#include "harness/store/json.hpp"
#include "harness/store/spool.hpp"

namespace kcert::cli {

namespace {
std::string xml(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 has no place for other control characters, even escaped.
        if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') out += ' ';
        else out += static_cast<char>(c);
    }
  }
  return out;
}

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
                         xml("kcert." + str(d, "kind") + "." + str(d, "family")), xml(str(d, "id")), seconds);
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
    if (d.contains("skipped") && d.at("skipped").is_string()) {
      // A control this build cannot run (a newer LibTorch's kernel): a skipped test, not a pass.
      ++skipped;
      cases += fmt::format("      <skipped message=\"{}\"/>\n", xml(str(d, "skipped")));
    } else if (d.contains("error") && d.at("error").is_string()) {
      ++errors;
      cases += fmt::format("      <error message=\"{}\" type=\"harness error\">{}</error>\n", xml(str(d, "error")),
                           xml(str(d, "error")));
    } else if (!unexpected.empty()) {
      ++failures;
      std::string what;
      for (const auto& u : unexpected) what += (what.empty() ? "" : "; ") + (u.is_string() ? u.get<std::string>() : u.dump());
      cases += fmt::format("      <failure message=\"{}\" type=\"expectation\">{}</failure>\n",
                           xml("verdicts differ from the YAML expectation: " + what), xml(reasons));
    } else if (!has_expectation && verdict == "FAIL") {
      ++failures;
      cases += fmt::format("      <failure message=\"FAIL\" type=\"verdict\">{}</failure>\n", xml(reasons));
    }
    cases += fmt::format("      <system-out>{}</system-out>\n    </testcase>\n", xml("verdict " + verdict + "\n" + reasons));
  }
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"kcert\" tests=\"{0}\" failures=\"{1}\" errors=\"{2}\" "
      "time=\"{3:.3f}\">\n  <testsuite name=\"{4}\" tests=\"{0}\" failures=\"{1}\" errors=\"{2}\" skipped=\"{7}\" time=\"{3:.3f}\" "
      "timestamp=\"{5}\">\n{6}  </testsuite>\n</testsuites>\n",
      documents.size(), failures, errors, total, xml(suite), xml(timestamp), cases, skipped);
}

void write_junit(const std::string& path, const std::vector<nlohmann::json>& documents, const std::string& suite) {
  auto ts = store::utc_now_iso();
  if (!ts.empty() && ts.back() == 'Z') ts.pop_back();  // xs:dateTime without a zone, as JUnit readers expect
  store::write_text_file(path, junit_xml(documents, suite, ts));
}

}  // namespace kcert::cli
