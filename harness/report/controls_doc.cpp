#include "harness/report/controls_doc.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h up to fmt 10, in ranges.h since 11)

#include <algorithm>
#include <cctype>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "harness/report/tables.hpp"
#include "harness/text/escape.hpp"

namespace kcert::report {

namespace {

using text::markdown_cell;

// An http(s) URL that can stand as a Markdown link destination as it is: no space, quote,
// angle bracket, backslash or parenthesis that would end it early.
bool is_plain_web_link(const std::string& url) {
  std::string head;
  for (char c : url.substr(0, 8)) head += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto rest = head.rfind("https://", 0) == 0 ? 8u : head.rfind("http://", 0) == 0 ? 7u : 0u;
  return rest > 0 && url.size() > rest && url.find_first_of(" \t\r\n\"'<>()[]\\`|") == std::string::npos;
}

std::string expected_text(const contract::Expectation& e) {
  std::string out;
  for (const auto& [gate, verdicts] : e.gates) {
    std::string v;
    for (auto x : verdicts) v += (v.empty() ? "" : "\\|") + std::string(stats::to_string(x));
    out += (out.empty() ? "" : ", ") + gate + " " + v;
  }
  return out.empty() ? "-" : out;
}

// The expectation, and where a LibTorch release has its own, that one beside it.
std::string expected_with_releases(const contract::TestCase& c) {
  std::string out = expected_text(c.expected);
  for (const auto& [release, e] : c.expected_on) out += "; on " + release + ": " + expected_text(e) + (e.note.empty() ? "" : " (" + markdown_cell(e.note) + ")");
  return out;
}

std::string short_ref(const std::string& url) {
  // Anything but a web link is text: `javascript:` or `data:` must not become a live link.
  if (!is_plain_web_link(url)) return markdown_cell(url);
  // github.com/owner/repo/pull/123 -> owner/repo#123; other URLs as their host/path.
  const std::string gh = "https://github.com/";
  if (url.rfind(gh, 0) == 0) {
    std::vector<std::string> parts;
    std::stringstream ss(url.substr(gh.size()));
    for (std::string p; std::getline(ss, p, '/');) parts.push_back(p);
    if (parts.size() >= 4 && (parts[2] == "pull" || parts[2] == "issues")) {
      return fmt::format("[{}/{}#{}]({})", parts[0], parts[1], parts[3], url);
    }
    if (parts.size() >= 2) return fmt::format("[{}/{}]({})", parts[0], parts[1], url);
  }
  return fmt::format("[link]({})", url);
}

// One table row per control of `kind`.
void markdown_control_rows(std::ostream& md, const std::vector<contract::TestCase>& cases, contract::Kind kind,
                           const MeasuredControls& measured) {
  md << (kind == contract::Kind::negative ? "## Negative controls\n\n" : "## Positive controls\n\n");
  md << "| id | family | mechanism | references | expected (YAML) | measured gates | overall | today's checks | note |\n"
        "|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& c : cases) {
    if (c.kind != kind) continue;
    std::string refs;
    for (const auto& r : c.references) refs += (refs.empty() ? "" : ", ") + short_ref(r);
    std::string gates = "not measured", overall = "-", checks = "-";
    if (const auto it = measured.outcomes.find(c.id); it != measured.outcomes.end()) {
      const auto& m = it->second;
      if (!m.error.empty()) {
        gates = "ERROR: " + markdown_cell(m.error);
      } else if (!m.skipped.empty()) {
        gates = "skipped: " + markdown_cell(m.skipped);
      } else {
        gates = fmt::format("{}/{}/{}", stats::to_string(m.algebra), stats::to_string(m.bias), stats::to_string(m.variance));
        const auto profile = measured.profile.find(c.id);
        if (profile != measured.profile.end() && !profile->second.empty()) gates += " (" + markdown_cell(profile->second) + ")";
        overall = std::string(stats::to_string(m.verdict)) + (m.unexpected.empty() ? "" : " **unexpected**");
        checks = fmt::format("{}/{}/{}", m.assert_close ? "flag" : "-", m.flash_attention ? "flag" : "-",
                             m.dynamo_fp64 ? "flag" : "-");
      }
    }
    const auto family = c.direction == contract::Direction::backward ? c.family + " (backward)" : c.family;
    md << fmt::format("| `{}` | {} | {} | {} | {} | {} | {} | {} | {} |\n", c.id, family, markdown_cell(c.mechanism), refs,
                      expected_with_releases(c), gates, overall, checks, markdown_cell(c.expected.note));
  }
  md << "\n";
}

}  // namespace

void add_measured(MeasuredControls& measured, const nlohmann::json& document, const std::string& source) {
  if (!document.contains("results") || !document.at("results").is_array()) throw std::invalid_argument("no \"results\" array");
  for (const auto& r : document.at("results")) {
    auto oc = eval::outcome_from_document(r);
    // A skip (this file's LibTorch lacks the kernel) does not hide another file's measurement.
    if (!oc.skipped.empty() && measured.outcomes.count(oc.id) && measured.outcomes.at(oc.id).skipped.empty()) continue;
    measured.profile[oc.id] = r.value("profile", "");
    measured.outcomes[oc.id] = std::move(oc);
  }
  measured.sources.push_back(source);
}

std::string controls_markdown(std::vector<contract::TestCase> cases, const MeasuredControls& measured) {
  std::sort(cases.begin(), cases.end(), [](const auto& a, const auto& b) {
    return std::tie(a.kind, a.family, a.id) < std::tie(b.kind, b.family, b.id);
  });
  std::ostringstream md;
  md << "# Controls\n\n"
     << "<!-- Generated by `kcert controls-doc` from testcases/ and measured results. Do not edit by hand. -->\n\n";
  int neg = 0, pos = 0;
  for (const auto& c : cases) (c.kind == contract::Kind::negative ? neg : pos)++;
  md << fmt::format("{} negative controls (real published defects: must be detected) and {} positive controls "
                    "(known-correct variants: must not FAIL). ",
                    neg, pos);
  if (measured.sources.empty()) {
    md << "No measured results were given.\n\n";
  } else {
    md << "Measured verdicts from " << fmt::format("{}", fmt::join(measured.sources, ", ")) << " (algebra/bias/variance, "
       << "overall; today's checks: assert_close, FlashAttention's rule, dynamo's fp64 rule; `-` not flagged).\n\n";
    std::vector<eval::ControlOutcome> all;
    for (const auto& [id, oc] : measured.outcomes) all.push_back(oc);
    md << "## Falsifiability of these results\n\n";
    markdown_falsifiability(md, eval::tabulate(all));
    md << "\n";
  }
  for (const auto kind : {contract::Kind::negative, contract::Kind::positive}) markdown_control_rows(md, cases, kind, measured);
  // Published backward defects a CPU replay cannot show (../shared/controls/backward-catalog.md):
  // listed so that a missing control is a stated gap, not a silent one.
  md << "## Backward defects not replayable on the CPU\n\n"
        "| catalog id | defect | why not here |\n|---|---|---|\n"
        "| BN6 | norm dgamma reduction drops warp partials on RDNA (pytorch#183861) | a wave32 GPU's warp-shuffle layout: "
        "the fault is the hardware's lane mapping, visible only under the results database's hardware key |\n"
        "| BN10 | FlashAttention-4 hdim 256 backward (TransformerEngine#3216) | a Blackwell GPU kernel; needs real activations "
        "and batch >= 2 on that device |\n"
        "| BN14 | ring attention backward across hops (ring-flash-attention#42) | needs a world size >= 4 (several ranks and "
        "their communication) |\n"
        "| BN15 | toolchain-dependent FlashAttention backward (flash-attention#498) | depends on the CUDA compiler that "
        "built the kernel: an environment key, not a kernel a CPU can run |\n\n";
  md << "Where a control's outcome differs from the catalog's prediction, its YAML says so in the\n"
        "expectation's note and in comments beside the widened expectation (an expectation changes\n"
        "only with a written reason).\n";
  return md.str();
}

}  // namespace kcert::report
