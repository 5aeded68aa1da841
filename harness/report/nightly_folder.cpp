#include "harness/report/nightly_folder.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <tuple>

#include "harness/report/junit.hpp"
#include "harness/report/tables.hpp"
#include "harness/runner/errors.hpp"
#include "harness/store/json.hpp"
#include "harness/text/escape.hpp"

namespace kcert::report {

NightlyAssessment assess_nightly(const runner::NightlyRun& run) {
  NightlyAssessment a;
  for (const auto& doc : run.documents) a.outcomes.push_back(eval::outcome_from_document(doc));
  std::sort(a.outcomes.begin(), a.outcomes.end(), [](const auto& x, const auto& y) {
    return std::tie(x.kind, x.family, x.id) < std::tie(y.kind, y.family, y.id);
  });
  a.table = eval::tabulate(a.outcomes);
  a.changes = eval::compare_runs(a.outcomes, run.previous);
  a.verdict = eval::nightly_verdict(a.table, a.changes);
  return a;
}

void print_nightly(std::ostream& out, const runner::NightlyRun& run, const NightlyAssessment& a) {
  print_controls(out, a.outcomes);
  print_falsifiability(out, a.table);
  out << "\nsince the last run: " << text::terminal_safe(run.previous_note) << "\n";
  for (const auto& b : run.baselines) out << "  against " << text::terminal_safe(b) << "\n";
  for (const auto& c : a.changes) out << "  " << text::terminal_safe(c.id) << ": " << c.what << "\n";
  if (a.changes.empty() && !run.baselines.empty()) out << "  no changes\n";
}

std::string nightly_summary_markdown(const runner::NightlyRun& run, const NightlyAssessment& a,
                                     const NightlyFolderOptions& options) {
  // Texts that come from results, the database, plugins or paths pass through markdown_cell:
  // a line ending or raw HTML in one must not make lines or live markup in summary.md.
  const auto& md_text = text::markdown_cell;
  std::ostringstream md;
  md << "# kcert nightly " << run.run_id << "\n\n";
  md << "- profile: " << (run.profile.empty() ? "contract shapes" : run.profile) << "\n";
  md << "- shards: " << run.shard_count << "; results read from the " << md_text(run.source) << "\n";
  md << "- environment(s): ";
  for (std::size_t i = 0; i < run.environments.size(); ++i) md << (i ? ", " : "") << "`" << run.environments[i] << "`";
  // In words when it is this machine's (a hash alone tells a reader nothing).
  if (!options.environment_words.empty()) md << ": " << md_text(options.environment_words);
  md << "\n- calibrations used: ";
  if (run.calibrations.empty()) md << "none (default thresholds)";
  for (std::size_t i = 0; i < run.calibrations.size(); ++i) md << (i ? ", " : "") << md_text(run.calibrations[i]);
  md << "\n- status: " << (options.exit_status == 0 ? "every control behaved as expected" : "ATTENTION") << " (exit "
     << options.exit_status << ")\n";
  for (const auto& r : a.verdict.reasons) md << "  - " << md_text(r) << "\n";
  md << "\n## Falsifiability\n\n";
  markdown_falsifiability(md, a.table);
  md << "\n## Controls\n\n";
  markdown_controls(md, a.outcomes);
  md << "\n## Since the last run\n\n" << run.previous_note << "\n\n";
  for (const auto& b : run.baselines) md << "- against " << md_text(b) << "\n";
  if (!run.baselines.empty()) md << "\n";
  for (const auto& c : a.changes) md << "- `" << md_text(c.id) << "`: " << md_text(c.what) << "\n";
  if (a.changes.empty() && !run.baselines.empty()) md << "No changes.\n";
  if (!a.table.unexpected.empty()) {
    md << "\n## Differences from the YAML expectations\n\n";
    for (const auto& u : a.table.unexpected) md << "- " << md_text(u) << "\n";
  }
  return md.str();
}

nlohmann::json nightly_results_document(const runner::NightlyRun& run, const NightlyAssessment& a,
                                        const NightlyFolderOptions& options) {
  nlohmann::json changes = nlohmann::json::array();
  for (const auto& c : a.changes) changes.push_back({{"id", c.id}, {"change", c.what}, {"alarming", c.alarming}});
  return {{"format", "kcert-nightly/1"},  // docs/schema/kcert-nightly-1.schema.json
          {"kcert_version", options.kcert_version},
          {"run_id", run.run_id},
          {"profile", run.profile},
          {"shard_count", run.shard_count},
          {"source", run.source},
          {"environments", run.environments},
          {"exit_status", options.exit_status},
          {"reasons", a.verdict.reasons},
          {"falsifiability", eval::to_json(a.table)},
          {"changes", changes},
          {"started_at", run.started_at.empty() ? nlohmann::json(nullptr) : nlohmann::json(run.started_at)},
          {"seconds", run.seconds >= 0 ? nlohmann::json(run.seconds) : nlohmann::json(nullptr)},
          {"previous", run.previous_note},
          {"baselines", run.baselines},
          {"results", run.documents}};
}

namespace {

// The JUnit file linked from the pages when it lies in the report folder (the usual
// --junit DIR/junit.xml): its path relative to DIR/html, or "".
std::string junit_link(const std::string& junit, const std::filesystem::path& html_dir) {
  if (junit.empty()) return "";
  std::error_code ec;
  const auto rel = std::filesystem::relative(std::filesystem::absolute(junit), std::filesystem::absolute(html_dir), ec);
  if (!ec && rel.string().rfind("../", 0) == 0 && rel.string().find("../", 3) == std::string::npos) return rel.generic_string();
  return "";
}

}  // namespace

nlohmann::json write_nightly_data(const runner::NightlyRun& run, const NightlyAssessment& a,
                                  const NightlyFolderOptions& options, const std::filesystem::path& dir) {
  // Refused when another user owns or may write it (kcert often runs as root: a folder
  // someone else prepared could turn its writes into writes through their links).
  store::make_private_directories(dir.string());
  store::make_private_directories((dir / "tails").string());
  store::write_text_file((dir / "summary.md").string(), nightly_summary_markdown(run, a, options));
  auto results = nightly_results_document(run, a, options);
  store::write_json_file((dir / "results.json").string(), results);
  for (const auto& [id, sample] : run.khat) {
    if (sample.empty()) continue;  // a skipped or failed case measured nothing: no tail file
    std::string csv = "replicate,khat\n";
    for (std::size_t i = 0; i < sample.size(); ++i) csv += fmt::format("{},{:.17g}\n", i, sample[i]);
    store::write_text_file((dir / "tails" / (store::safe_file_name(id) + ".csv")).string(), csv);
  }
  return results;
}

HtmlReportSummary write_nightly_site(const runner::NightlyRun& run, const nlohmann::json& results,
                                     const NightlyFolderOptions& options, const std::filesystem::path& dir) {
  if (!options.junit.empty()) write_junit(options.junit, run.documents, "kcert nightly " + run.run_id);
  // The same results as a static site with plots (report/html.hpp).
  HtmlReportInput html;
  html.results = results;
  html.khat = run.khat;
  html.history = run.history;
  html.history_note = run.history_note;
  html.environment_words = options.environment_words;
  html.run_folder_link = "../";
  html.junit_link = junit_link(options.junit, dir / "html");
  return write_html_report(html, dir / "html");
}

ReportFolderLock::ReportFolderLock(const std::string& dir, const std::function<void(const std::string&)>& waiting) {
  store::make_private_directories(dir);
  const std::string path = dir + "/.kcert-report.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd_ < 0) throw runner::InputError(path + ": cannot open the report folder's lock: " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  waiting("report folder " + text::terminal_safe(dir) + " is being written by another kcert; waiting for it");
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const std::string why = std::strerror(errno);
    ::close(fd_);
    throw runner::InputError(path + ": cannot lock the report folder: " + why);
  }
}

ReportFolderLock::~ReportFolderLock() { ::close(fd_); }

}  // namespace kcert::report
