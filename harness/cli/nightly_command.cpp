#include "harness/cli/nightly_command.hpp"
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "eval/changes.hpp"
#include "eval/falsifiability.hpp"
#include "harness/cli/exit_codes.hpp"
#include "harness/cli/flag_checks.hpp"
#include "harness/cli/html_report.hpp"
#include "harness/cli/junit.hpp"
#include "harness/cli/report.hpp"
#include "harness/cli/run_cases_command.hpp"
#include "harness/cli/run_storage.hpp"
#include "harness/cli/terminal_text.hpp"
#include "harness/store/json.hpp"
#include "harness/store/postgres.hpp"

namespace kcert::cli {

namespace {

struct NightlyOptions {
  std::vector<std::string> paths{"testcases"};
  std::string profile;
  std::vector<std::string> filters;
  std::string shard;  // "K/N"
  std::string run_id;
  std::string report_dir;
  std::string spool_dir;
  std::string junit;
  std::string finish;
  std::uint64_t replicates = 0;
  std::string device = "cpu";
  bool no_db = false;
  bool quiet = false;
};

struct Shard {
  int index = 0;  // 0-based
  int count = 1;
};

Shard parse_shard(const std::string& s) {
  if (s.empty()) return {};
  static const std::regex form(R"(^([0-9]+)/([0-9]+)$)");
  std::smatch m;
  if (!std::regex_match(s, m, form)) throw UsageError("--shard: expected K/N (e.g. 2/4), got '" + s + "'");
  const int k = std::stoi(m[1]), n = std::stoi(m[2]);
  if (n < 1 || k < 1 || k > n) throw UsageError("--shard: expected 1 <= K <= N, got '" + s + "'");
  return {k - 1, n};
}

// Deterministic split: cases sorted by id, case i goes to shard i mod N. Every machine
// computes the same split from the same suite, whatever order the files were found in.
std::vector<contract::TestCase> select(std::vector<contract::TestCase> cases, const std::vector<std::string>& filters,
                                       Shard shard) {
  auto kept = runner::filter_cases(std::move(cases), filters);
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  std::vector<contract::TestCase> mine;
  for (std::size_t i = 0; i < kept.size(); ++i) {
    if (static_cast<int>(i % static_cast<std::size_t>(shard.count)) == shard.index) mine.push_back(std::move(kept[i]));
  }
  return mine;
}

struct NightlyData {
  std::string run_id, profile, source;  // source: "database" or "spool"
  int shard_count = 1;
  std::vector<nlohmann::json> documents;
  std::map<std::string, std::vector<double>> khat;  // by case id
  std::vector<std::string> environments, calibrations;
  std::map<std::string, eval::ControlOutcome> previous;
  std::string previous_note;
  std::vector<std::string> baselines;  // the runs `previous` came from, one line each (eval::describe_baselines)
  std::map<std::string, std::vector<HistoryPoint>> history;  // by case id, same environment
  std::string junit;  // write JUnit XML here too ("" = no)
  std::string environment_words;  // for the HTML report ("" = not this machine's environment)
  std::string history_note = "History needs the results database (this run's results come from its spool).";
  double seconds = -1;  // how long this process ran the controls (< 0: it did not run them all)
  std::string started_at;  // the run's start (UTC, ISO 8601; "" = not known)
};

// One kcert writes a report folder at a time (issue 53, item 9): two nightlies given one
// --report interleaved their pages, and the index named whichever run finished last. The
// lock is taken where the report is written, not at the start (the shards of one run may
// share a --report, and only the last one, or --finish, writes it), and a writer waits for
// the one before it rather than failing: two shards finishing together may both see the run
// complete and both write its (same) report.
class ReportFolderLock {
 public:
  explicit ReportFolderLock(const std::string& dir) {
    store::make_private_directories(dir);
    const std::string path = dir + "/.kcert-report.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd_ < 0) throw InputError(path + ": cannot open the report folder's lock: " + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    std::cerr << "kcert: report folder " << terminal_safe(dir) << " is being written by another kcert; waiting for it\n";
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const std::string why = std::strerror(errno);
      ::close(fd_);
      throw InputError(path + ": cannot lock the report folder: " + why);
    }
  }
  ~ReportFolderLock() { ::close(fd_); }
  ReportFolderLock(const ReportFolderLock&) = delete;
  ReportFolderLock& operator=(const ReportFolderLock&) = delete;

 private:
  int fd_ = -1;
};

int report(const NightlyData& d, const std::string& report_dir, bool quiet) {
  const ReportFolderLock lock(report_dir);
  std::vector<eval::ControlOutcome> outcomes;
  for (const auto& doc : d.documents) outcomes.push_back(eval::outcome_from_document(doc));
  std::sort(outcomes.begin(), outcomes.end(), [](const auto& a, const auto& b) {
    return std::tie(a.kind, a.family, a.id) < std::tie(b.kind, b.family, b.id);
  });
  const auto table = eval::tabulate(outcomes);
  const auto changes = eval::compare_runs(outcomes, d.previous);
  const auto status = eval::nightly_verdict(table, changes);
  const auto& reasons = status.reasons;
  const int code = status.status == eval::NightlyStatus::error     ? exit_input_error
                   : status.status == eval::NightlyStatus::finding ? exit_finding
                                                                   : exit_ok;

  // Console.
  if (!quiet) {
    print_controls(std::cout, outcomes);
    print_falsifiability(std::cout, table);
    std::cout << "\nsince the last run: " << terminal_safe(d.previous_note) << "\n";
    for (const auto& b : d.baselines) std::cout << "  against " << terminal_safe(b) << "\n";
    for (const auto& c : changes) std::cout << "  " << terminal_safe(c.id) << ": " << c.what << "\n";
    if (changes.empty() && !d.baselines.empty()) std::cout << "  no changes\n";
  }

  // Report folder: summary.md, results.json, tails/<case>.csv.
  const std::filesystem::path dir(report_dir);
  // Refused when another user owns or may write it (kcert often runs as root: a folder
  // someone else prepared could turn its writes into writes through their links).
  store::make_private_directories(dir.string());
  store::make_private_directories((dir / "tails").string());
  {
    std::ostringstream md;
    md << "# kcert nightly " << d.run_id << "\n\n";
    md << "- profile: " << (d.profile.empty() ? "contract shapes" : d.profile) << "\n";
    md << "- shards: " << d.shard_count << "; results read from the " << d.source << "\n";
    md << "- environment(s): ";
    for (std::size_t i = 0; i < d.environments.size(); ++i) md << (i ? ", " : "") << "`" << d.environments[i] << "`";
    // In words when it is this machine's (a hash alone tells a reader nothing).
    if (!d.environment_words.empty()) md << ": " << d.environment_words;
    md << "\n- calibrations used: ";
    if (d.calibrations.empty()) md << "none (default thresholds)";
    for (std::size_t i = 0; i < d.calibrations.size(); ++i) md << (i ? ", " : "") << d.calibrations[i];
    md << "\n- status: " << (code == exit_ok ? "every control behaved as expected" : "ATTENTION") << " (exit " << code << ")\n";
    for (const auto& r : reasons) md << "  - " << r << "\n";
    md << "\n## Falsifiability\n\n";
    markdown_falsifiability(md, table);
    md << "\n## Controls\n\n";
    markdown_controls(md, outcomes);
    md << "\n## Since the last run\n\n" << d.previous_note << "\n\n";
    for (const auto& b : d.baselines) md << "- against " << b << "\n";
    if (!d.baselines.empty()) md << "\n";
    for (const auto& c : changes) md << "- `" << c.id << "`: " << c.what << "\n";
    if (changes.empty() && !d.baselines.empty()) md << "No changes.\n";
    if (!table.unexpected.empty()) {
      md << "\n## Differences from the YAML expectations\n\n";
      for (const auto& u : table.unexpected) md << "- " << u << "\n";
    }
    store::write_text_file((dir / "summary.md").string(), md.str());
  }
  nlohmann::json changes_json = nlohmann::json::array();
  for (const auto& c : changes) changes_json.push_back({{"id", c.id}, {"change", c.what}, {"alarming", c.alarming}});
  const nlohmann::json results_json = {{"format", "kcert-nightly/1"},  // docs/schema/kcert-nightly-1.schema.json
                          {"kcert_version", KCERT_VERSION},
                          {"run_id", d.run_id},
                          {"profile", d.profile},
                          {"shard_count", d.shard_count},
                          {"source", d.source},
                          {"environments", d.environments},
                          {"exit_status", code},
                          {"reasons", reasons},
                          {"falsifiability", eval::to_json(table)},
                          {"changes", changes_json},
                          {"started_at", d.started_at.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.started_at)},
                          {"seconds", d.seconds >= 0 ? nlohmann::json(d.seconds) : nlohmann::json(nullptr)},
                          {"previous", d.previous_note},
                          {"baselines", d.baselines},
                          {"results", d.documents}};
  store::write_json_file((dir / "results.json").string(), results_json);
  for (const auto& [id, sample] : d.khat) {
    if (sample.empty()) continue;  // a skipped or failed case measured nothing: no tail file
    std::string csv = "replicate,khat\n";
    for (std::size_t i = 0; i < sample.size(); ++i) csv += fmt::format("{},{:.17g}\n", i, sample[i]);
    store::write_text_file((dir / "tails" / (store::safe_file_name(id) + ".csv")).string(), csv);
  }
  std::cout << "\nreport: " << std::filesystem::absolute(dir).string() << "/summary.md\n";
  if (!d.junit.empty()) write_junit(d.junit, d.documents, "kcert nightly " + d.run_id);
  {
    // The same results as a static site with plots (html_report.hpp).
    HtmlReportInput html;
    html.results = results_json;
    html.khat = d.khat;
    html.history = d.history;
    html.history_note = d.history_note;
    html.environment_words = d.environment_words;
    html.run_folder_link = "../";
    // The JUnit file is linked when it lies in the report folder (the usual --junit DIR/junit.xml).
    if (!d.junit.empty()) {
      std::error_code ec;
      const auto rel = std::filesystem::relative(std::filesystem::absolute(d.junit), std::filesystem::absolute(dir / "html"), ec);
      if (!ec && rel.string().rfind("../", 0) == 0 && rel.string().find("../", 3) == std::string::npos)
        html.junit_link = rel.generic_string();
    }
    const auto s = write_html_report(html, dir / "html");
    std::cout << "html: " << std::filesystem::absolute(dir / "html").string() << "/index.html (" << s.pages << " pages, "
              << s.plots << " plots)\n";
    if (!s.plot_note.empty()) std::cerr << "kcert: warning: " << s.plot_note << "\n";
  }
  for (const auto& r : reasons) std::cout << "attention: " << terminal_safe(r) << "\n";
  std::cout << tally_line(table, d.seconds) << "\n";
  return code;
}

NightlyData from_database(store::ResultStore& db, const std::string& run_id) {
  NightlyData d;
  const auto summary = db.run_summary(run_id);
  if (!summary) throw InputError("run " + run_id + " is not in the database " + db.describe());
  d.run_id = run_id;
  d.profile = summary->profile;
  d.shard_count = summary->shard_count;
  d.started_at = summary->started_at;
  d.source = "database";
  const bool every_shard_reported = static_cast<int>(summary->shards_finished.size()) >= summary->shard_count;
  // Every shard reported and the run still `running`: a finish lost to a crash, or to two
  // shards finishing at once under an older kcert. --finish repairs it (issue 53, item 7), so
  // the run counts as a baseline for the next night's "since the last run".
  if (every_shard_reported && summary->status == "running" && db.close_if_complete(run_id)) {
    std::cerr << "kcert: run " << run_id << " had every shard reported but was still marked running; marked finished\n";
  }
  if (!every_shard_reported) {
    std::string missing;
    for (int k = 0; k < summary->shard_count; ++k) {
      if (std::find(summary->shards_finished.begin(), summary->shards_finished.end(), k) == summary->shards_finished.end()) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(k + 1);
      }
    }
    throw InputError(fmt::format("run {} is not complete: shard(s) {} of {} have not reported", run_id, missing,
                                 summary->shard_count));
  }
  std::set<std::string> envs, cals;
  // Per control of this run: its R and calibration, to say what differs from each baseline.
  std::map<std::string, std::pair<std::uint64_t, std::string>> facts_by_id;
  for (auto& r : db.run_results(run_id)) {
    envs.insert(r.fingerprint);
    if (!r.calibration.empty()) cals.insert(r.family + ": " + r.calibration);
    facts_by_id[r.case_id] = {eval::outcome_from_document(r.document).replicates,
                              r.calibration.empty() ? std::string() : r.family + ": " + r.calibration};
    d.khat[r.case_id] = r.khat;
    d.documents.push_back(std::move(r.document));
  }
  d.environments.assign(envs.begin(), envs.end());
  d.calibrations.assign(cals.begin(), cals.end());
  const auto previous = db.previous_results(run_id);
  // The runs compared against, named with what differs from this one (issue 32, item 3).
  std::map<std::string, eval::BaselineRun> baselines;
  std::map<std::string, eval::RunFacts> now_by_baseline;  // this run, on each baseline's controls only
  for (const auto& p : previous) {
    const auto o = eval::outcome_from_document(p.document);
    d.previous.emplace(p.case_id, o);
    auto& b = baselines[p.run_id];
    b.run_id = p.run_id;
    b.started_at = p.run_started_at;
    b.kcert_version = p.run_kcert_version;
    b.profile = p.run_profile;
    b.controls += 1;
    if (o.replicates > 0) b.replicates.insert(o.replicates);
    if (!p.calibration.empty()) b.calibrations.insert(p.family + ": " + p.calibration);
    auto& now = now_by_baseline[p.run_id];
    now.kcert_version = KCERT_VERSION;
    if (const auto it = facts_by_id.find(p.case_id); it != facts_by_id.end()) {
      if (it->second.first > 0) now.replicates.insert(it->second.first);
      if (!it->second.second.empty()) now.calibrations.insert(it->second.second);
    }
  }
  std::vector<eval::BaselineRun> runs;
  for (auto& [id, b] : baselines) runs.push_back(std::move(b));
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.started_at > b.started_at; });
  for (const auto& b : runs) d.baselines.push_back(eval::describe_baselines(now_by_baseline[b.run_id], {b}).front());
  if (d.environments.size() == 1) {
    d.history_note.clear();
    for (const auto& doc : d.documents) {
      store::HistoryQuery q;
      q.case_id = doc.value("id", "");
      q.environment = d.environments.front();
      auto& points = d.history[q.case_id];
      for (const auto& h : db.history(q))
        points.push_back({h.started_at, h.run_id, h.verdict, h.variance_u.value_or(-1), h.max_abs_z.value_or(-1)});
    }
  } else {
    d.history_note = "History is drawn per environment; this run spans " + std::to_string(d.environments.size()) + ".";
  }
  d.previous_note = previous.empty() ? "no earlier finished run of this profile in this environment"
                                     : fmt::format("compared with {} control(s) of the previous run(s) of this profile "
                                                   "in the same environment",
                                                   previous.size());
  return d;
}

}  // namespace

void register_nightly_command(CLI::App& app, kernels::Registry& registry, const runner::SuitePolicy& policy) {
  auto o = std::make_shared<NightlyOptions>();
  auto* cmd = app.add_subcommand("nightly", "Run the control suite, store it, compare with the last run, write a report");
  cmd->footer(
      "What users run every night and after every environment change. The suite (or the part\n"
      "selected by --filter and --shard) runs with the newest stored calibration of each family\n"
      "in this environment; every result is spooled, then stored in PostgreSQL (KCERT_DB or the\n"
      "PG* variables); the falsifiability table, the changes since the previous finished run of\n"
      "the same profile in the same environment, and a report folder (summary.md, results.json,\n"
      "tails/<control>.csv) are produced from what the database holds, so a run merged from\n"
      "shards reads exactly like an unsharded one.\n\n"
      "Shards: N machines run `kcert nightly --shard K/N --run-id ID` (same ID); cases are split\n"
      "by sorted id, case i to shard i mod N. The shard that completes the run prints the merged\n"
      "table; `kcert nightly --finish ID` prints it again (or says which shards are missing).\n\n"
      "Examples:\n"
      "  kcert nightly                                  # the whole suite at contract shapes\n"
      "  kcert nightly --profile smoke --filter rope    # a quick part\n"
      "  kcert nightly --shard 2/4 --run-id nightly-1234\n"
      "  kcert nightly --finish nightly-1234\n\n"
      "Exit status: 0 every control behaved as expected; 1 a control's verdicts differ from its\n"
      "YAML expectation (a negative escaped, a positive FAILed), or a negative escaped, a\n"
      "positive newly FAILed or a verdict flipped since the last run; 2 a harness or input error\n"
      "(incl. an incomplete run at --finish), or a database that was wanted (no --no-db) and\n"
      "unavailable, so nothing was stored or compared (the spool keeps every result for\n"
      "`kcert upload`).");
  cmd->add_option("dirs", o->paths, "control folders or files")->capture_default_str();
  cmd->add_option("--profile", o->profile, "apply each control's profiles.<name> (e.g. smoke)");
  add_filter_option(cmd, o->filters);
  cmd->add_option("--shard", o->shard, "run part K of N (1-based), e.g. 2/4");
  cmd->add_option("--run-id", o->run_id, "run id (required with --shard N > 1; default: a new one)")->check(run_id_check());
  cmd->add_option("--report", o->report_dir, "report folder (default $KCERT_HOME/reports/RUN_ID; KCERT_HOME defaults to .kcert)");
  cmd->add_option("--spool", o->spool_dir, "folder for the spool file (default $KCERT_HOME/spool)");
  cmd->add_option("--junit", o->junit, "also write JUnit XML: one testcase per control, failing when it misses its expectation");
  cmd->add_option("--finish", o->finish, "print the merged table and report of a (sharded) run from the database")
      ->check(run_id_check());
  cmd->add_option("--replicates", o->replicates, "override R for every control (3 to 2^20)")->check(replicate_count());
  cmd->add_option("--device", o->device, "where kernels run")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  cmd->add_flag("--no-db", o->no_db, "spool only; table and report from this process's results, no comparison");
  cmd->add_flag("--quiet", o->quiet, "no progress lines, no console table (the report is still written)");
  cmd->callback([o, &registry, &policy]() {
    const auto started = std::chrono::steady_clock::now();
    if (!o->finish.empty()) {
      if (o->no_db) throw UsageError("--finish reads the database; it cannot be combined with --no-db");
      store::ResultStore db(store::conninfo_from_environment());
      // The documents come from the database, where anyone who may write it can put anything:
      // a field of another type is this run's bad input, not an internal error (issue 53).
      // from_database reads every document (this run's and the baselines') through eval's
      // reader, so a bad one is met here, before any report is written.
      NightlyData data;
      try {
        data = from_database(db, o->finish);
      } catch (const nlohmann::json::exception& e) {
        throw InputError("run " + o->finish + ": a result stored in the database is not a document kcert writes: " +
                         json_problem(e));
      } catch (const std::invalid_argument& e) {  // eval's reader: "ID.gates.variance.verdict: missing verdict"
        throw InputError("run " + o->finish + ": a result stored in the database is not a document kcert writes: " + e.what());
      }
      data.junit = o->junit;
      data.environment_words = environment_words_if_here(data.environments);
      const auto dir = o->report_dir.empty() ? state_dir() + "/reports/" + o->finish : o->report_dir;
      const int code = report(data, dir, o->quiet);
      if (code != exit_ok) throw ExitWith(code);
      return;
    }
    const auto shard = parse_shard(o->shard);
    if (shard.count > 1 && o->run_id.empty()) {
      throw UsageError("--shard " + o->shard + ": the shards of one run must share an id; pass --run-id (e.g. the "
                       "scheduler's job id)");
    }
    // A file that fails to load is an ERROR result of its own, in the first shard (or where a
    // filter matches its path), and the other controls run: one alias bomb or invalid byte in
    // the folder used to refuse the whole nightly.
    std::vector<runner::LoadFailure> failures;
    auto selected = select(load_cases(o->paths, registry, o->profile, policy, &failures), o->filters, shard);
    std::vector<engine::CaseResult> load_errors;
    for (const auto& f : failures) {
      if (shard.index == 0 && runner::any_filter_matches(o->filters, f.file)) load_errors.push_back(runner::load_failure_result(f));
    }
    if (selected.empty() && load_errors.empty()) throw InputError("no control matches the filters in this shard");

    // Calibrations of this environment, when the database can tell.
    const auto env = store::detect_environment();
    std::unique_ptr<store::ResultStore> db;
    if (!o->no_db) {
      try {
        db = std::make_unique<store::ResultStore>(store::conninfo_from_environment());
      } catch (const std::exception& e) {
        std::cerr << "kcert: warning: database unavailable, default thresholds and no comparison (--no-db runs without "
                     "one on purpose): "
                  << e.what() << "\n";
      }
    }
    if (db && !o->run_id.empty()) {
      // A run id names one run: refuse to add to a closed run or to repeat a shard.
      if (const auto existing = db->run_summary(o->run_id)) {
        if (existing->status != "running") {
          throw InputError("run " + o->run_id + " is already " + existing->status + "; choose a new --run-id");
        }
        const auto& done = existing->shards_finished;
        if (std::find(done.begin(), done.end(), shard.index) != done.end()) {
          throw InputError(fmt::format("shard {}/{} of run {} has already reported", shard.index + 1, shard.count, o->run_id));
        }
      }
    }
    if (db) {
      const auto cals = db->latest_calibrations(env.fingerprint);
      if (cals.empty()) {
        std::cerr << "kcert: no calibration for environment " << env.fingerprint
                  << ": default variance thresholds (warn_K 2, fail_K 10)\n";
      }
      for (auto& tc : selected) {
        // A calibration is derived from a family's forward positives (calibrate_command):
        // a backward case keeps its own thresholds (gradients have their own error scale).
        if (tc.direction != contract::Direction::forward) continue;
        const auto it = cals.find(tc.family);
        if (it == cals.end()) continue;
        tc.gates.variance.warn_k = it->second.warn_k;
        tc.gates.variance.fail_k = it->second.fail_k;
        // Calibrations from before kcert-cal/2 carry no bias floors: the case keeps its own.
        if (it->second.bias_c) tc.gates.bias.c = *it->second.bias_c;
        if (it->second.bias_c_magnitude) tc.gates.bias.c_magnitude = *it->second.bias_c_magnitude;
        tc.calibration = it->second.label();
      }
      for (const auto& [family, c] : cals) {
        std::cerr << fmt::format("kcert: family {}: calibration {} (warn_K {:.4g}, fail_K {:.4g}{}, {} by {})\n", family,
                                 c.label(), c.warn_k, c.fail_k,
                                 c.bias_c ? fmt::format("; bias c {:.3g}, c_magnitude {:.3g}", *c.bias_c,
                                                        c.bias_c_magnitude.value_or(stats::BiasThresholds{}.c_magnitude))
                                          : std::string(),
                                 c.created_at, c.created_by);
      }
    }

    StorageOptions so;
    so.db = !o->no_db;
    so.force = true;
    so.run_id = o->run_id;
    so.spool_dir = o->spool_dir;
    so.profile = o->profile;
    so.shard_index = shard.index;
    so.shard_count = shard.count;
    so.configuration = {{"cases", o->paths}, {"filters", o->filters}, {"replicates", o->replicates}, {"device", o->device}, {"command", "nightly"}};
    RunStorage storage(so);
    engine::RunOptions options;
    if (o->replicates > 0) options.replicates = o->replicates;
    options.device = o->device;
    for (const auto& r : load_errors) {
      storage.store(r);
      if (!o->quiet) std::cerr << "kcert: " << terminal_safe(r.testcase.id) << ": ERROR (" << terminal_safe(r.error) << ")\n";
    }
    auto results = run_cases(selected, registry, options, policy, o->quiet,
                             [&](const std::vector<engine::CaseResult>& done) { storage.store(done.back()); });
    results.insert(results.begin(), load_errors.begin(), load_errors.end());
    storage.finish("finished");
    const auto& run_id = storage.run().run_id;
    const auto dir = o->report_dir.empty() ? state_dir() + "/reports/" + run_id : o->report_dir;

    if (db && storage.database_ok()) {
      const auto summary = db->run_summary(run_id);
      if (summary && static_cast<int>(summary->shards_finished.size()) < summary->shard_count) {
        std::cout << fmt::format("shard {}/{} of run {} stored ({} control(s)); {} of {} shard(s) have reported. The last "
                                 "shard prints the merged table; or run: kcert nightly --finish {}\n",
                                 shard.index + 1, shard.count, run_id, results.size(), summary->shards_finished.size(),
                                 summary->shard_count, run_id);
        bool error = false;
        for (const auto& r : results) error |= !r.error.empty();
        if (error) throw ExitWith(exit_input_error);
        return;
      }
      auto data = from_database(*db, run_id);
      data.junit = o->junit;
      if (shard.count == 1) data.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      if (data.environments.size() == 1 && data.environments.front() == env.fingerprint)
        data.environment_words = store::describe_environment(env);
      const int code = report(data, dir, o->quiet);
      if (code != exit_ok) throw ExitWith(code);
      return;
    }
    // No database: this process's own results, nothing to compare with.
    NightlyData d;
    d.run_id = run_id;
    d.profile = o->profile;
    d.shard_count = shard.count;
    d.source = "spool (" + storage.spool_path() + ")";
    d.environments = {env.fingerprint};
    d.environment_words = store::describe_environment(env);
    d.previous_note = "not compared: no database";
    d.started_at = storage.run().started_at;
    for (const auto& r : results) {
      d.documents.push_back(store::to_json(r));
      d.khat[r.testcase.id] = r.variance.khat;
    }
    d.junit = o->junit;
    if (shard.count == 1) d.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const int code = report(d, dir, o->quiet);
    if (code != exit_ok) throw ExitWith(code);
    if (!o->no_db) {
      // A nightly that stored nothing and compared nothing must not look like a good night.
      std::cout << "attention: the database was unavailable: nothing stored, nothing compared with the last run; "
                   "upload later with: kcert upload "
                << storage.spool_path() << "\n";
      throw ExitWith(exit_input_error);
    }
  });
}

}  // namespace kcert::cli
