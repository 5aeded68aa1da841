#include "harness/report/html.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "harness/runner/errors.hpp"
#include "harness/report/control_view.hpp"
#include "harness/report/plots.hpp"
#include "harness/report/khat_csv.hpp"
#include "harness/report/tables.hpp"
#include "harness/stats/verdict.hpp"
#include "harness/text/escape.hpp"
#include "eval/falsifiability.hpp"
#include "harness/stats/format.hpp"
#include "harness/store/environment.hpp"
#include "harness/store/json.hpp"
#include "harness/store/json_text.hpp"
#include "harness/io/regular_file.hpp"
#include "harness/store/postgres.hpp"


namespace kcert::report {

using runner::InputError;
using runner::UsageError;

namespace fs = std::filesystem;

namespace {

// Every text on a page goes through esc.
std::string esc(std::string_view s) { return text::html_escape(s); }

// An http(s) URL with a host, case-insensitive in the scheme as browsers read it.
bool is_web_link(const std::string& s) {
  std::string head;
  for (char c : s.substr(0, 8)) head += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto rest = head.rfind("https://", 0) == 0 ? 8u : head.rfind("http://", 0) == 0 ? 7u : 0u;
  return rest > 0 && s.size() > rest && s.find_first_of(" \t\r\n\"<>\\") == std::string::npos;
}

// The run-level parts of a nightly document (its header, changes, the falsifiability table),
// read leniently; a control's parts come typed (control_view.hpp).
std::string num(const nlohmann::json& j) {
  if (j.is_number()) return stats::format_number(j.get<double>());
  if (j.is_string()) return j.get<std::string>();
  return "-";
}

std::string text(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : "";
}

// Beside a variance PASS whose evidence does not reach the declared horizon (issue 32): the
// chip says so where the verdict is read, not only in a footnote.
std::string short_of_horizon(const std::optional<double>& h) {
  if (!h) return "";
  return " <span class=\"badge short\" title=\"PASS short of the horizon: the evidence supports " +
         (std::isnan(*h) ? std::string("fewer") : stats::format_number(*h)) + " replicates\">short</span>";
}

std::string badge(const std::string& verdict) {
  const std::string cls = verdict == "PASS"   ? "pass"
                          : verdict == "INCONCLUSIVE" ? "inconclusive"
                          : verdict == "WARN" ? "warn"
                          : verdict == "FAIL" ? "fail"
                          : verdict == "SKIP" ? "skip"
                                              : "error";
  return "<span class=\"badge " + cls + "\">" + esc(verdict.empty() ? "-" : verdict) + "</span>";
}

// The algebra gate of an opaque production did not run (issue 33): "n/a", not the PASS its
// default verdict reads.
const std::string kNotApplicableBadge = "<span class=\"badge skip\" title=\"not applicable: opaque production\">n/a</span>";

// A probe setting's or gradient's algebra badge: n/a where `algebra_applicable` is false.
std::string point_algebra_badge(const PointView& point) {
  return point.algebra_applicable ? badge(point.algebra) : kNotApplicableBadge;
}

// A number as the reports print it, "-" when the document gives none.
std::string number_or_dash(const std::optional<double>& x) { return x ? stats::format_number(*x) : "-"; }

// A FAIL or WARN that is what the control is for (a negative detected as expected).
std::string designed_badge(const std::string& verdict) {
  if (verdict != "FAIL" && verdict != "WARN") return badge(verdict);
  return "<span class=\"badge designed\" title=\"detected, as the control is designed to be\">" + esc(verdict) + "</span>";
}

constexpr const char* kStyle = R"(
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 78em; }
table { border-collapse: collapse; margin: 0.6em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.55em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; padding: 0.05em 0.5em; border-radius: 0.6em; font-weight: bold; font-size: 0.9em; }
.pass { background: #d7f0d7; color: #155a15; } .warn { background: #fff0c2; color: #7a5a00; }
.short { background: #e8e8f4; color: #3a3a6a; font-weight: normal; }
.fail { background: #f8d0d0; color: #8a1010; } .error { background: #ddd; color: #333; }
.skip { background: #fff; color: #555; border: 1px dashed #999; }
.designed { background: #dde6f5; color: #1f3f7f; }
th.sortable { cursor: pointer; } th.sortable::after { content: " \2195"; color: #999; }
input.filter { margin: 0.3em 0; padding: 0.2em 0.4em; width: 24em; }
.inconclusive { background: #fff; color: #6a4a00; border: 1px dashed #c09000; }
.attention { background: #fff4e5; border-left: 4px solid #e08a00; padding: 0.5em 1em; }
figure { display: inline-block; margin: 0.5em 1em 1em 0; max-width: 46em; vertical-align: top; }
figure img { width: 44em; border: 1px solid #ddd; }
figcaption { font-size: 0.9em; color: #444; }
pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; }
)";

// The index's controls table: a filter box (every word must occur in the row) and headers
// that sort (numbers as numbers, "-" last). The page stays complete without scripts.
constexpr const char* kIndexScript = R"(<script>
(function () {
  const table = document.getElementById("controls");
  const box = document.getElementById("filter");
  const rows = () => Array.from(table.tBodies[0].rows);
  box.addEventListener("input", () => {
    const words = box.value.toLowerCase().split(/\s+/).filter((w) => w);
    for (const row of rows()) {
      const text = row.textContent.toLowerCase();
      row.style.display = words.every((w) => text.includes(w)) ? "" : "none";
    }
  });
  Array.from(table.tHead.rows[0].cells).forEach((th, column) => {
    th.addEventListener("click", () => {
      const down = th.dataset.order !== "up";
      th.dataset.order = down ? "up" : "down";
      const key = (row) => {
        const t = row.cells[column].textContent.trim();
        const n = parseFloat(t);
        return t === "-" ? null : isNaN(n) ? t : n;
      };
      const sorted = rows().sort((a, b) => {
        const x = key(a), y = key(b);
        if (x === null || y === null) return x === y ? 0 : x === null ? 1 : -1;
        const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
        return down ? c : -c;
      });
      for (const row of sorted) table.tBodies[0].appendChild(row);
    });
  });
})();
</script>
)";

std::string page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + esc(title) +
         "</title><style>" + kStyle + "</style></head><body>\n" + body + "\n</body></html>\n";
}

std::string falsifiability_table(const nlohmann::json& f) {
  if (!f.is_object() || !f.contains("gates")) return "<p>No falsifiability table in these results.</p>";
  std::string out = fmt::format(
      "<table><tr><th></th><th>negatives detected (of {})</th><th>positives FAIL (of {})</th><th>positives WARN</th></tr>",
      num(f.value("negatives", nlohmann::json())), num(f.value("positives", nlohmann::json())));
  const std::pair<const char*, const char*> rows[] = {
      {"algebra", "algebra gate"}, {"bias", "bias gate (deciding statistics)"}, {"variance", "variance gate"},
      {"combined", "combined"}, {"bias_signed_only", "bias gate, signed alone (notes)"},
      {"combined_signed_only", "combined, signed alone (notes)"}};
  for (const auto& [key, label] : rows) {
    if (!f.at("gates").contains(key)) continue;
    const auto& g = f.at("gates").at(key);
    out += fmt::format("<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>", label,
                       num(g.value("negatives_detected", nlohmann::json())), num(g.value("positives_fail", nlohmann::json())),
                       num(g.value("positives_warn", nlohmann::json())));
  }
  // INCONCLUSIVE on its own row (issue 32): neither a detection nor an escape.
  if (f.at("gates").contains("combined") && f.at("gates").at("combined").contains("negatives_inconclusive")) {
    const auto& g = f.at("gates").at("combined");
    out += fmt::format("<tr><td>combined INCONCLUSIVE (could not see the floor)</td><td class=\"num\">{}</td><td class=\"num\" "
                       "colspan=\"2\">{} positives</td></tr>",
                       num(g.value("negatives_inconclusive", nlohmann::json())), num(g.value("positives_inconclusive", nlohmann::json())));
  }
  const std::pair<const char*, const char*> checks[] = {{"assert_close", "today: assert_close (first replicate)"},
                                                        {"flash_attention", "today: FlashAttention 2x + 1 ULP rule"},
                                                        {"dynamo_fp64", "today: dynamo fp64 RMSE 3x rule"}};
  for (const auto& [key, label] : checks) {
    if (!f.contains("baselines") || !f.at("baselines").contains(key)) continue;
    const auto& g = f.at("baselines").at(key);
    out += fmt::format("<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">-</td></tr>", label,
                       num(g.value("negatives_detected", nlohmann::json())), num(g.value("positives_fail", nlohmann::json())));
  }
  out += "</table>";
  if (f.contains("torch") && f.at("torch").is_string() && !f.at("torch").get<std::string>().empty())
    out += "<p>On LibTorch " + esc(f.at("torch").get<std::string>()) + ".</p>";
  for (const auto& c : f.value("expected_under_condition", nlohmann::json::array()))
    out += "<p><code>" + esc(text(c, "id")) + "</code> was judged by its expectation " +
           esc(condition_in_words(text(c, "condition"))) + ".</p>";
  for (const auto& sk : f.value("skipped", nlohmann::json::array()))
    out += "<p>" + badge("SKIP") + " <code>" + esc(text(sk, "id")) + "</code>: " + esc(text(sk, "reason")) +
           " (counted nowhere above)</p>";
  return out;
}

}  // namespace

std::string environment_words_if_here(const std::vector<std::string>& fingerprints) {
  if (fingerprints.size() != 1) return "";
  const auto here = store::detect_environment();
  return fingerprints.front() == here.fingerprint ? store::describe_environment(here) : "";
}

// What a control page shows first (issue 32, item 4): the buckets the bias gate flagged, in
// the family's terms, with their signed ULP effect, z and verdict, and the floors they were
// judged against; or, when none was flagged, how far the largest |z| was from the cut.
std::string flagged_bucket_section(const ControlView& v) {
  const auto& bias = v.bias;
  if (!bias.present) return "";
  std::string out = "<h2>Flagged buckets</h2>\n";
  out += "<p>Bias gate over " + esc(number_or_dash(bias.buckets)) + " " + esc(bias.axis) + " bucket(s) at R = " +
         esc(number_or_dash(bias.replicates)) + ": a bucket FAILs when |z| &gt; " + esc(number_or_dash(bias.z_cut)) +
         ", its standardized effect &gt; s_min " + esc(number_or_dash(bias.s_min)) + " and its ULP effect &gt; c (signed " +
         esc(number_or_dash(bias.c)) + ", magnitude " + esc(number_or_dash(bias.c_magnitude)) +
         " ULP); |z| past the cut alone is a WARN.</p>\n";
  std::string rows;
  int shown = 0;
  std::int64_t flagged = 0;
  std::string per_statistic;
  for (const auto& [statistic, n] : bias.flagged_counts) {
    flagged += n;
    per_statistic += (per_statistic.empty() ? "" : ", ") + std::to_string(n) + " " + statistic;
    int here = 0;
    for (const auto& b : bias.flagged) {
      if (b.statistic != statistic || here++ >= 10) continue;
      rows += "<tr><td>" + statistic + "</td><td>" + esc(b.label) + "</td><td class=\"num\">" +
              (b.signed_ulp ? esc(fmt::format("{:+.3g}", *b.signed_ulp)) : "-") + "</td><td class=\"num\">" +
              esc(number_or_dash(b.z)) + "</td><td class=\"num\">" + esc(number_or_dash(b.effect)) + "</td><td>" +
              badge(b.verdict) + (b.attributed ? " attributed to the reference" : "") + "</td></tr>\n";
      ++shown;
    }
  }
  if (shown == 0) {
    const bool any_z = v.max_abs_z && *v.max_abs_z >= 0;
    return out + "<p>No bucket flagged" + (any_z ? ": the largest |z| is " + esc(stats::format_number(*v.max_abs_z)) : std::string()) +
           ".</p>\n";
  }
  return out + "<table><tr><th>statistic</th><th>bucket</th><th>ULP effect (+: production above)</th><th>z</th>"
               "<th>effect (sd)</th><th>verdict</th></tr>\n" + rows + "</table>\n" +
         (flagged > shown ? "<p>Flagged in all: " + per_statistic + "; the strongest 10 per statistic are shown, "
                            "results.json keeps up to 64 per statistic.</p>\n"
                          : std::string());
}

// The case's expectation, as the YAML states it: the verdicts each gate may take, and its note.
std::string expectation_line(const ControlView& v) {
  if (!v.expectation_stated) return "";
  std::string out = "<p><b>Expected:</b> ";
  bool first = true;
  for (const auto& [gate, verdicts] : v.expected_gates) {
    std::string allowed;
    for (const auto& verdict : verdicts) allowed += (allowed.empty() ? "" : " or ") + verdict;
    out += (first ? "" : "; ") + gate + " " + esc(allowed);
    first = false;
  }
  if (v.expected_note) out += " (" + esc(*v.expected_note) + ")";
  return out + "</p>\n";
}

HtmlReportSummary write_html_report(const HtmlReportInput& input, const fs::path& out) {
  HtmlReportSummary summary;
  const auto& doc = input.results;
  // Refused when another user owns or may write them: the plot data and gnuplot's SVGs are
  // opened by name inside, and only a folder of kcert's own user keeps links out of them.
  store::make_private_directories(out.string());
  store::make_private_directories((out / "plots").string());
  store::make_private_directories((out / "yaml").string());
  const auto results = doc.value("results", nlohmann::json::array());
  bool plots_ok = true;

  std::string rows;
  std::size_t index = 0;
  for (const auto& r : results) {
    const std::size_t i = index++;
    // The control's parts are read through the lenient typed view after check_report_document
    // refused what the pages would misdraw; a nlohmann error here (a path this misses) still
    // names the result, not nlohmann's internal message.
    try {
    const std::string id = text(r, "id");
    const std::string stem = store::safe_file_name(id);
    // The index row, the page and its plots read the control's typed view (issue 51).
    const ControlView v = control_view(r);
    // A skipped control measured nothing: no U, no z, no expectation met or missed.
    const bool skipped = v.verdict == "SKIP";
    // A negative detected as its YAML expects is not red (pytest's xfail idea): its FAIL and
    // WARN badges are drawn "as designed"; an escape or an unexpected verdict keeps its colour.
    const bool as_designed = v.detected_as_designed();
    const auto mark = [&](const std::string& verdict) { return as_designed ? designed_badge(verdict) : badge(verdict); };
    rows += fmt::format(
        "<tr><td><a href=\"{}.html\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>\n",
        esc(stem), esc(id), esc(v.kind), esc(v.family),
        // An opaque production's algebra gate did not run (issue 33): "n/a", not a PASS badge.
        v.algebra_applicable ? mark(v.gate_verdict("algebra")) : kNotApplicableBadge, mark(v.gate_verdict("bias")),
        mark(v.gate_verdict("variance")) + short_of_horizon(v.variance_short_of_horizon), mark(v.verdict),
        skipped || !v.variance_u ? "-" : stats::format_number(*v.variance_u),
        v.max_abs_z && *v.max_abs_z >= 0 && !skipped ? stats::format_number(*v.max_abs_z) : "-",
        skipped ? "not run" : v.unexpected.empty() ? (as_designed ? "met (detected as designed)" : "met")
                                                   : "<span class=\"badge fail\">missed</span>");

    // The control's own page.
    std::ostringstream gp;
    const auto found = input.khat.find(id);
    const std::vector<double> khat = found == input.khat.end() ? std::vector<double>() : found->second;
    const auto plots = plan_plots(v, khat, out / "plots", stem, gp);
    std::string history_file;
    if (const auto it = input.history.find(id); it != input.history.end()) history_file = history_plot(it->second, out / "plots", stem, gp);
    const fs::path script = out / "plots" / (stem + ".gp");
    store::write_text_file(script.string(), gp.str());
    std::string why;
    bool drawn = plots_ok && run_gnuplot(out / "plots", gp.str(), stem + "-gnuplot.log", why);
    if (!drawn && plots_ok) {
      if (why.rfind("gnuplot is not installed", 0) == 0) {
        plots_ok = false;  // no point trying again for every control
        summary.plot_note = why;
      } else if (summary.plot_note.empty()) {
        summary.plot_note = why;
      }
    }

    std::ostringstream body;
    body << "<p><a href=\"index.html\">&larr; all controls</a></p>\n<h1>" << esc(id) << "</h1>\n";
    body << "<p>" << esc(v.kind) << " control, family <b>" << esc(v.family) << "</b>: reference <code>"
         << esc(v.reference.variant) << "</code> (" << esc(v.reference.version) << "), production <code>"
         << esc(v.production.variant) << "</code> (" << esc(v.production.version) << ")</p>\n";
    body << "<table><tr><th>algebra</th><th>bias</th><th>variance</th><th>overall</th><th>replicates</th></tr><tr><td>"
         << (v.algebra_applicable ? badge(v.gate_verdict("algebra")) : kNotApplicableBadge) << "</td><td>" << badge(v.gate_verdict("bias"))
         << "</td><td>" << badge(v.gate_verdict("variance")) << "</td><td>" << badge(v.verdict)
         << "</td><td class=\"num\">" << number_or_dash(v.replicates) << "</td></tr></table>\n";
    body << expectation_line(v);
    if (!skipped && !v.error) body << flagged_bucket_section(v);
    if (!v.unexpected.empty()) {
      body << "<div class=\"attention\"><b>Differs from its YAML expectation:</b><ul>";
      for (const auto& u : v.unexpected) body << "<li>" << esc(u) << "</li>";
      body << "</ul></div>\n";
    }
    body << "<h2>Mechanism</h2><p>" << esc(v.mechanism) << "</p>\n";
    body << "<h2>References</h2><ul>";
    for (const auto& link : v.references) {
      // Only web references become links: a `javascript:` or `data:` reference in a case
      // file (or a crafted result) would otherwise run in whoever opens the published site.
      if (is_web_link(link)) body << "<li><a href=\"" << esc(link) << "\">" << esc(link) << "</a></li>";
      else body << "<li>" << esc(link) << "</li>";
    }
    body << "</ul>\n<h2>Gates</h2><table>";
    for (const auto& g : v.gates)
      body << "<tr><th>" << g.gate << "</th><td>" << badge(g.verdict) << "</td><td>" << esc(g.reason) << "</td></tr>";
    body << "</table>\n";
    // A swept case: each probe setting's verdicts, and which setting decided each gate.
    if (v.sweep) {
      body << "<h2>Probe settings</h2><p>Certified on each setting; each gate shows the worst (decided by: algebra "
           << esc(v.sweep->decided_algebra) << ", bias " << esc(v.sweep->decided_bias) << ", variance "
           << esc(v.sweep->decided_variance) << ").</p><table><tr><th>setting</th><th>probe</th><th>overall</th>"
              "<th>algebra</th><th>bias</th><th>variance</th><th>U</th><th>max |z|</th></tr>";
      for (const auto& pt : v.sweep->points) {
        body << "<tr><td>" << esc(pt.name) << "</td><td><code>" << esc(pt.probe) << "</code></td><td>" << badge(pt.verdict)
             << "</td><td>" << point_algebra_badge(pt) << "</td><td>" << badge(pt.bias) << "</td><td>" << badge(pt.variance)
             << "</td><td class=\"num\">" << esc(number_or_dash(pt.U)) << "</td><td class=\"num\">"
             << esc(number_or_dash(pt.max_abs_z)) << "</td></tr>";
      }
      body << "</table>\n";
    }
    // A backward case (issue 31): each gradient's verdicts, buckets and reduction size N, and
    // which gradient decided each gate.
    // A backward case that did not run (SKIP, ERROR) has no gradients: no empty table.
    if (v.backward && !v.backward->points.empty()) {
      body << "<h2>Gradients</h2><p>Backward, upstream gradient dy " << esc(v.dy_kind) << " (shift "
           << esc(number_or_dash(v.dy_shift)) << ", scale " << esc(number_or_dash(v.dy_scale))
           << "); each gate shows the worst gradient (decided by: algebra " << esc(v.backward->decided_algebra) << ", bias "
           << esc(v.backward->decided_bias) << ", variance " << esc(v.backward->decided_variance)
           << ").</p><table><tr><th>gradient</th><th>of</th><th>buckets</th><th>N</th><th>overall</th>"
              "<th>algebra</th><th>bias</th><th>variance</th><th>U</th><th>max |z|</th></tr>";
      for (const auto& g : v.backward->points) {
        body << "<tr><td>" << esc(g.name) << "</td><td>" << esc(g.input) << "</td><td>" << esc(g.bucket_axis)
             << "</td><td class=\"num\">"
             << (g.reduction_size ? esc(number_or_dash(g.reduction_size)) + " " + esc(g.reduces) : std::string("-"))
             << "</td><td>" << badge(g.verdict) << "</td><td>" << point_algebra_badge(g) << "</td><td>" << badge(g.bias)
             << "</td><td>" << badge(g.variance) << "</td><td class=\"num\">" << esc(number_or_dash(g.U))
             << "</td><td class=\"num\">" << esc(number_or_dash(g.max_abs_z)) << "</td></tr>";
      }
      body << "</table>\n";
    }
    if (v.error) body << "<div class=\"attention\"><b>Harness error:</b> " << esc(*v.error) << "</div>\n";
    if (v.skipped)
      body << "<div class=\"attention\"><b>Skipped, not run in this environment:</b> " << esc(*v.skipped) << "</div>\n";
    body << "<h2>Plots</h2>\n";
    if (!drawn) body << "<p>" << esc(why) << "</p>\n";
    if (plots.figures.empty()) body << "<p>No K-hat above 0 and no kept bias bucket: nothing to plot (every replicate within one ULP of the oracle).</p>\n";
    if (found == input.khat.end()) body << "<p>No K-hat sample for this control.</p>\n";
    // The deciding gate's plots first: the bias planes when the bias gate is the worse one.
    auto figures = plots.figures;
    const auto bias_verdict = stats::parse_verdict(v.gate_verdict("bias")), variance_verdict = stats::parse_verdict(v.gate_verdict("variance"));
    if (bias_verdict && variance_verdict && *bias_verdict > *variance_verdict) {
      std::stable_partition(figures.begin(), figures.end(),
                            [](const auto& f) { return f.first.find("-bias-") != std::string::npos; });
    }
    for (const auto& [file, caption] : figures) {
      if (!drawn) break;
      body << "<figure><img src=\"plots/" << esc(file) << "\" alt=\"" << esc(file) << "\"><figcaption>" << esc(caption)
           << "</figcaption></figure>\n";
      ++summary.plots;
    }
    body << "<h2>History</h2>\n";
    if (!input.history_note.empty()) body << "<p>" << esc(input.history_note) << "</p>\n";
    else if (!history_file.empty() && drawn) {
      body << "<figure><img src=\"plots/" << esc(history_file) << "\" alt=\"history\"><figcaption>U and max |z| of this "
           << "control over the runs the database holds in the same environment (every profile, oldest first); "
           << "the table marks verdict changes.</figcaption></figure>\n";
      ++summary.plots;
    }
    if (const auto it = input.history.find(id); it != input.history.end() && !it->second.empty()) {
      body << "<table><tr><th>started (UTC)</th><th>run</th><th>verdict</th><th>U</th><th>max |z|</th></tr>";
      std::string last;
      for (const auto& h : it->second) {
        body << "<tr><td>" << esc(h.started_at) << "</td><td>" << esc(h.run_id) << "</td><td>" << badge(h.verdict)
             << (last.empty() || last == h.verdict ? "" : " &larr; changed") << "</td><td class=\"num\">"
             << (h.u >= 0 ? stats::format_number(h.u) : "-") << "</td><td class=\"num\">"
             << (h.max_abs_z >= 0 ? stats::format_number(h.max_abs_z) : "-") << "</td></tr>";
        last = h.verdict;
      }
      body << "</table>\n";
    }
    body << "<h2>Environment</h2><p>"
         << esc(input.environment_words.empty() ? "not known to this report (see the run in the database)" : input.environment_words)
         << "; LibTorch " << esc(v.torch_version) << " on " << esc(v.device) << "</p>\n";
    body << "<h2>Case file</h2>\n";
    // From the text the result carries, never from the file `source` names: a result comes
    // from a report folder or the database, which anyone who can write either can craft, and
    // opening its path published that file (`source: /etc/shadow` as root, /proc/self/environ
    // with KCERT_DB's password) or blocked on a FIFO forever.
    if (v.case_text) {
      store::write_text_file((out / "yaml" / (stem + ".yaml")).string(), *v.case_text);
      body << "<p><a href=\"yaml/" << esc(stem) << ".yaml\">" << esc(v.source) << "</a></p><pre>" << esc(*v.case_text) << "</pre>\n";
    } else {
      body << "<p>" << esc(v.source.empty() ? std::string("no case file recorded") : v.source)
           << ": the result carries no case text (written by a kcert before case_text was stored)</p>\n";
    }
    store::write_text_file((out / (stem + ".html")).string(), page("kcert: " + id, body.str()));
    ++summary.pages;
    } catch (const nlohmann::json::exception& e) {
      throw ReportFormatError(fmt::format("results[{}] (id '{}'): {}", i, text(r, "id"), json_problem(e)));
    }
  }

  // The index: attention first, then what changed, the falsifiability table, every control.
  try {
  std::ostringstream body;
  body << "<h1>kcert nightly " << esc(text(doc, "run_id")) << "</h1>\n<p>profile: "
       << esc(text(doc, "profile").empty() ? "contract shapes" : text(doc, "profile")) << "; results from the "
       << esc(text(doc, "source")) << "; environment(s): ";
  for (const auto& e : doc.value("environments", nlohmann::json::array())) body << "<code>" << esc(e.get<std::string>()) << "</code> ";
  body << (input.environment_words.empty() ? "" : "(" + esc(input.environment_words) + ")") << "</p>\n";
  // When it ran, for how long, and the run's other files (beside html/ in a nightly's folder).
  {
    std::string when;
    if (doc.contains("started_at") && doc.at("started_at").is_string()) when = "started " + esc(text(doc, "started_at"));
    if (doc.contains("seconds") && doc.at("seconds").is_number() && doc.at("seconds").get<double>() >= 0) {
      when += (when.empty() ? "ran " : ", ran ") + duration_text(doc.at("seconds").get<double>());
    }
    if (!when.empty()) body << "<p>" << when << "</p>\n";
    if (!input.run_folder_link.empty()) {
      const auto& up = input.run_folder_link;
      body << "<p>Files: <a href=\"" << esc(up) << "results.json\">results.json</a> &middot; <a href=\"" << esc(up)
           << "summary.md\">summary.md</a> &middot; <a href=\"" << esc(up) << "tails/\">tails/</a> (K-hat samples, CSV)";
      if (!input.junit_link.empty()) body << " &middot; <a href=\"" << esc(input.junit_link) << "\">JUnit XML</a>";
      body << "</p>\n";
    }
  }
  const auto reasons = doc.value("reasons", nlohmann::json::array());
  if (!reasons.empty()) {
    body << "<div class=\"attention\"><b>Attention</b> (exit " << num(doc.value("exit_status", nlohmann::json())) << ")<ul>";
    for (const auto& r : reasons) body << "<li>" << esc(r.get<std::string>()) << "</li>";
    body << "</ul></div>\n";
  } else {
    body << "<p>" << badge("PASS") << " every control behaved as expected.</p>\n";
  }
  body << "<h2>Since the last run</h2>\n<p>" << esc(text(doc, "previous")) << "</p>";
  const auto baselines = doc.value("baselines", nlohmann::json::array());
  if (!baselines.empty()) {
    body << "<p>Compared against:</p><ul>";
    for (const auto& b : baselines) body << "<li>" << esc(b.get<std::string>()) << "</li>";
    body << "</ul>";
  }
  const auto changes = doc.value("changes", nlohmann::json::array());
  body << "<ul>";
  for (const auto& c : changes)
    body << "<li>" << (c.value("alarming", false) ? "<b>" : "") << esc(text(c, "id")) << ": " << esc(text(c, "change"))
         << (c.value("alarming", false) ? "</b>" : "") << "</li>";
  if (changes.empty() && !baselines.empty()) body << "<li>No changes.</li>";
  body << "</ul>\n<h2>Falsifiability</h2>\n" << falsifiability_table(doc.value("falsifiability", nlohmann::json()));
  body << "\n<h2>Controls</h2>\n<input class=\"filter\" id=\"filter\" type=\"search\" "
          "placeholder=\"filter: id, family, kind, verdict\" aria-label=\"filter the controls\">\n"
          "<table id=\"controls\"><thead><tr><th class=\"sortable\">control</th><th class=\"sortable\">kind</th>"
          "<th class=\"sortable\">family</th><th class=\"sortable\">algebra</th><th class=\"sortable\">bias</th>"
          "<th class=\"sortable\">variance</th><th class=\"sortable\">overall</th><th class=\"sortable\">U</th>"
          "<th class=\"sortable\">max |z|</th><th class=\"sortable\">expectation</th></tr></thead><tbody>\n"
       << rows << "</tbody></table>\n" << kIndexScript;
  if (!plots_ok) body << "<p>" << esc(summary.plot_note) << "</p>\n";
  store::write_text_file((out / "index.html").string(), page("kcert nightly " + text(doc, "run_id"), body.str()));
  ++summary.pages;
  } catch (const nlohmann::json::exception& e) {
    throw ReportFormatError("the run's fields (run_id, environments, reasons, changes, falsifiability): " + json_problem(e));
  }
  return summary;
}

namespace {

// The fields the report reads before it looks inside one result, with their types: a
// crafted results.json is refused with the field's path. Throws ReportFormatError.
void check_report_document(const nlohmann::json& doc) {
  using J = nlohmann::json;
  const auto fail = [](const std::string& field, const std::string& what) {
    throw ReportFormatError(field + ": expected " + what);
  };
  const auto strings = [&](const J& o, const std::string& path, const char* key) {
    if (!o.contains(key)) return;
    const auto& v = o.at(key);
    if (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const J& x) { return x.is_string(); }))
      fail(path + key, "a list of strings");
  };
  const auto optional = [&](const J& o, const std::string& path, const char* key, bool (J::*is)() const noexcept, const char* what) {
    if (o.contains(key) && !o.at(key).is_null() && !(o.at(key).*is)()) fail(path + key, what);
  };
  if (doc.contains("format") && doc.at("format") != "kcert-nightly/1") fail("format", "kcert-nightly/1");
  for (const char* k : {"run_id", "profile", "source", "previous"}) optional(doc, "", k, &J::is_string, "a string");
  optional(doc, "", "exit_status", &J::is_number, "a number");
  optional(doc, "", "falsifiability", &J::is_object, "an object");
  strings(doc, "", "environments");
  strings(doc, "", "reasons");
  strings(doc, "", "baselines");
  if (doc.contains("changes")) {
    const auto& c = doc.at("changes");
    if (!c.is_array()) fail("changes", "a list");
    for (std::size_t i = 0; i < c.size(); ++i) {
      const std::string p = "changes[" + std::to_string(i) + "].";
      if (!c[i].is_object()) fail(p.substr(0, p.size() - 1), "an object");
      optional(c[i], p, "alarming", &J::is_boolean, "true or false");
    }
  }
  if (!doc.contains("results") || !doc.at("results").is_array()) fail("results", "a list of results");
  const auto& results = doc.at("results");
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const std::string p = "results[" + std::to_string(i) + "]";
    if (!r.is_object()) fail(p, "an object");
    if (!r.contains("id") || !r.at("id").is_string()) fail(p + ".id", "a string");
    const std::string q = p + " (id '" + r.at("id").get<std::string>() + "').";
    for (const char* k : {"verdict", "kind", "family", "mechanism", "source", "case_text", "error", "skipped"})
      optional(r, q, k, &J::is_string, "a string");
    for (const char* side : {"reference", "production"}) {
      if (!r.contains(side) || !r.at(side).is_object()) fail(q + side, "an object");
    }
    if (!r.contains("gates") || !r.at("gates").is_object()) fail(q + "gates", "an object");
    for (const char* g : {"algebra", "bias", "variance"}) {
      if (!r.at("gates").contains(g) || !r.at("gates").at(g).is_object()) fail(q + "gates." + g, "an object");
    }
    for (const char* k : {"unexpected", "references"}) optional(r, q, k, &J::is_array, "a list");
    for (const char* k : {"provenance", "probe", "sweep", "backward"}) optional(r, q, k, &J::is_object, "an object");
    // The settings and floors the plots draw as lines: a crafted value (null included) is
    // refused here, named, rather than drawn from a default by the lenient typed view.
    const auto number = [&](const J& o, const std::string& path, const char* key) {
      if (o.contains(key) && !o.at(key).is_number()) fail(path + key, "a number");
    };
    const auto& variance = r.at("gates").at("variance");
    optional(variance, q + "gates.variance.", "tail", &J::is_object, "an object");
    if (variance.contains("tail") && variance.at("tail").is_object()) {
      const auto& tail = variance.at("tail");
      optional(tail, q + "gates.variance.tail.", "settings", &J::is_object, "an object");
      if (tail.contains("settings") && tail.at("settings").is_object()) {
        for (const char* k : {"warn_K", "fail_K", "horizon"}) number(tail.at("settings"), q + "gates.variance.tail.settings.", k);
      }
    }
    const auto& bias = r.at("gates").at("bias");
    optional(bias, q + "gates.bias.", "thresholds", &J::is_object, "an object");
    if (bias.contains("thresholds") && bias.at("thresholds").is_object()) {
      // z_cut is printed only ("-" when null, as a NaN is stored); the other three are lines.
      optional(bias.at("thresholds"), q + "gates.bias.thresholds.", "z_cut", &J::is_number, "a number");
      for (const char* k : {"s_min", "c", "c_magnitude"}) number(bias.at("thresholds"), q + "gates.bias.thresholds.", k);
    }
  }
}

}  // namespace

std::string json_problem(const nlohmann::json::exception& e) {
  // nlohmann's text after its "[json.exception.type_error.302] " tag.
  std::string what = e.what();
  if (const auto end = what.find("] "); what.rfind("[json.exception.", 0) == 0 && end != std::string::npos) what.erase(0, end + 2);
  const bool missing = dynamic_cast<const nlohmann::json::out_of_range*>(&e) != nullptr;
  return (missing ? "a field is missing or out of range (" : "a field has the wrong type (") + what +
         "); not a results.json as kcert nightly writes it (docs/schema/kcert-nightly-1.schema.json)";
}

HtmlReportInput read_report_folder(const fs::path& folder, bool with_history) {
  const std::string file = (folder / "results.json").string();
  if (!fs::exists(folder / "results.json")) throw InputError(file + ": no such file (is this a nightly report folder?)");
  std::string json_text;
  try {
    json_text = io::read_regular_file(file, std::uint64_t{1} << 30, io::Links::follow, "a results.json");
  } catch (const std::runtime_error& e) {
    throw InputError(e.what());
  }
  // A crafted folder (anyone who can write the report folder or the database can make one):
  // 100,000-deep nesting segfaulted the parse, a field of another type printed nlohmann's
  // internal error. Both are refused here with the file and the field.
  constexpr int kMaxDepth = 64;
  if (store::json_nested_deeper_than(json_text, kMaxDepth))
    throw InputError(fmt::format("{}: nested deeper than {} levels: not a results.json as kcert nightly writes it", file, kMaxDepth));
  HtmlReportInput input;
  try {
    input.results = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(fmt::format("{}: not valid JSON (at byte {}; invalid UTF-8, a syntax error or a truncated file)", file, e.byte));
  }
  if (!input.results.is_object()) throw InputError(file + ": not a JSON object");
  try {
    check_report_document(input.results);
  } catch (const ReportFormatError& e) {
    throw InputError(file + ": " + e.what() + " (docs/schema/kcert-nightly-1.schema.json)");
  }
  for (const auto& r : input.results.value("results", nlohmann::json::array())) {
    // The samples the nightly wrote beside its results (khat_reader reads their CSV form).
    const auto csv = folder / "tails" / (store::safe_file_name(text(r, "id")) + ".csv");
    // Found in the folder, not named by the user: a link there is not followed (issue 53).
    std::error_code ec;
    if (fs::exists(fs::symlink_status(csv, ec))) input.khat[text(r, "id")] = read_khat_file(csv.string(), FollowLinks::no);
  }
  const auto envs = input.results.value("environments", std::vector<std::string>());
  input.environment_words = environment_words_if_here(envs);
  if (!with_history) {
    input.history_note = "History needs the results database (not read: --no-db).";
  } else {
    try {
      store::ResultStore db(store::conninfo_from_environment());
      for (const auto& r : input.results.value("results", nlohmann::json::array())) {
        store::HistoryQuery q;
        q.case_id = text(r, "id");
        q.environment = envs.size() == 1 ? envs[0] : "";
        auto& points = input.history[q.case_id];
        for (const auto& h : db.history(q))
          points.push_back({h.started_at, h.run_id, h.verdict, h.variance_u.value_or(-1), h.max_abs_z.value_or(-1)});
      }
    } catch (const std::exception& e) {
      input.history_note = std::string("History needs the results database, which is unavailable: ") + e.what();
      input.history.clear();
    }
  }
  return input;
}

}  // namespace kcert::report
