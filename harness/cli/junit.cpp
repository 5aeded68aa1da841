#include "harness/cli/junit.hpp"

#include "eval/falsifiability.hpp"
#include "harness/stats/format.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>

#include "harness/store/json.hpp"
#include "harness/store/spool.hpp"

namespace kcert::cli {

namespace {
// Text for an XML 1.0 attribute or element: the five entities escaped, and what XML 1.0
// cannot hold at all dropped (CI's JUnit parsers refuse the whole file over one): C0 control
// characters other than tab, LF and CR, bytes that are not UTF-8, U+FFFE and U+FFFF.
std::string xml(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&apos;"; break;
        default:
          if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') out += ' ';
          else out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    const std::size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    std::uint32_t cp = len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = len > 0 && i + len <= s.size();
    for (std::size_t k = 1; ok && k < len; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      ok = (d & 0xC0) == 0x80;
      cp = (cp << 6) | (d & 0x3F);
    }
    ok = ok && !(len == 2 && cp < 0x80) && !(len == 3 && cp < 0x800) && !(len == 4 && cp < 0x10000) &&
         !(cp >= 0xD800 && cp <= 0xDFFF) && cp <= 0x10FFFF && cp != 0xFFFE && cp != 0xFFFF;
    if (ok) out.append(s, i, len);
    i += ok ? len : 1;  // an invalid byte is dropped alone; what follows may be valid
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
    } else if (!has_expectation && verdict == "INCONCLUSIVE") {
      // Certified nothing (issue 32): as the exit status, a failure a CI view shows, of its own type.
      ++failures;
      cases += fmt::format("      <failure message=\"INCONCLUSIVE: too few replicates to see an effect at a gate's floor\" "
                           "type=\"inconclusive\">{}</failure>\n",
                           xml(reasons));
    }
    cases += fmt::format("      <system-out>{}</system-out>\n    </testcase>\n", xml("verdict " + shown + "\n" + reasons));
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
