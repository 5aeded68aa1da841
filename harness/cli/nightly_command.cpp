#include "harness/cli/nightly_command.hpp"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>

#include "eval/changes.hpp"
#include "harness/cli/exit_codes.hpp"
#include "harness/cli/flag_checks.hpp"
#include "harness/report/html.hpp"
#include "harness/report/nightly_folder.hpp"
#include "harness/report/tables.hpp"
#include "harness/cli/run_cases_command.hpp"
#include "harness/cli/build_info.hpp"
#include "harness/text/escape.hpp"
#include "harness/runner/nightly.hpp"
#include "harness/runner/run_storage.hpp"
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

// How the report is shown beside the run's data: a JUnit file to write too, and this
// machine's environment in words ("" when the run's results come from elsewhere).
struct ReportExtras {
  std::string junit;
  std::string environment_words;
};

// The run's report: the console's tables, the report folder (report/nightly_folder.hpp), and
// the nightly's exit status.
int write_report(const runner::NightlyRun& d, const ReportExtras& extras, const std::string& report_dir, bool quiet) {
  const report::ReportFolderLock lock(report_dir, [](const std::string& why) { std::cerr << "kcert: " << why << "\n"; });
  const auto assessment = report::assess_nightly(d);
  const auto status = assessment.verdict.status;
  const int code = status == eval::NightlyStatus::error     ? exit_input_error
                   : status == eval::NightlyStatus::finding ? exit_finding
                                                            : exit_ok;
  if (!quiet) report::print_nightly(std::cout, d, assessment);
  const std::filesystem::path dir(report_dir);
  const report::NightlyFolderOptions folder{extras.junit, extras.environment_words, code, KCERT_VERSION};
  const auto results = report::write_nightly_data(d, assessment, folder, dir);
  std::cout << "\nreport: " << std::filesystem::absolute(dir).string() << "/summary.md\n";
  const auto html = report::write_nightly_site(d, results, folder, dir);
  std::cout << "html: " << std::filesystem::absolute(dir / "html").string() << "/index.html (" << html.pages << " pages, "
            << html.plots << " plots)\n";
  if (!html.plot_note.empty()) std::cerr << "kcert: warning: " << html.plot_note << "\n";
  for (const auto& r : assessment.verdict.reasons) std::cout << "attention: " << text::terminal_safe(r) << "\n";
  std::cout << report::tally_line(assessment.table, d.seconds) << "\n";
  return code;
}

// The run from the database. Its documents (this run's and the baselines') are read here, and
// anyone who may write the database can put anything there: a field of another type is this
// run's bad input, not an internal error (issue 53).
runner::NightlyRun read_run(store::ResultStore& db, const std::string& run_id) {
  try {
    return runner::run_from_database(db, run_id, KCERT_VERSION, print_note);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("run " + run_id + ": a result stored in the database is not a document kcert writes: " +
                     report::json_problem(e));
  } catch (const std::invalid_argument& e) {  // eval's reader: "ID.gates.variance.verdict: missing verdict"
    throw InputError("run " + run_id + ": a result stored in the database is not a document kcert writes: " + e.what());
  }
}

std::string report_folder(const NightlyOptions& o, const std::string& run_id) {
  return o.report_dir.empty() ? runner::state_dir() + "/reports/" + run_id : o.report_dir;
}

// `kcert nightly --finish RUN`: the merged table and report of a (sharded) run.
int finish_run(const NightlyOptions& o) {
  if (o.no_db) throw UsageError("--finish reads the database; it cannot be combined with --no-db");
  store::ResultStore db(store::conninfo_from_environment());
  const auto run = read_run(db, o.finish);
  return write_report(run, {o.junit, report::environment_words_if_here(run.environments)}, report_folder(o, o.finish), o.quiet);
}

// The results database, or none (with a warning) when it was wanted and cannot be reached.
std::unique_ptr<store::ResultStore> open_database(const NightlyOptions& o) {
  if (o.no_db) return nullptr;
  try {
    return std::make_unique<store::ResultStore>(store::conninfo_from_environment());
  } catch (const std::exception& e) {
    std::cerr << "kcert: warning: database unavailable, default thresholds and no comparison (--no-db runs without "
                 "one on purpose): "
              << e.what() << "\n";
    return nullptr;
  }
}

// This environment's calibrations applied to the selected cases, each family's on stderr.
void calibrate_cases(store::ResultStore& db, const store::Environment& env, std::vector<contract::TestCase>& cases) {
  const auto cals = db.latest_calibrations(env.fingerprint);
  if (cals.empty()) {
    std::cerr << "kcert: no calibration for environment " << env.fingerprint
              << ": default variance thresholds (warn_K 2, fail_K 10)\n";
  }
  runner::apply_calibrations(cases, cals);
  for (const auto& [family, c] : cals) {
    std::cerr << fmt::format("kcert: family {}: calibration {} (warn_K {:.4g}, fail_K {:.4g}{}, {} by {})\n", family,
                             c.label(), c.warn_k, c.fail_k,
                             c.bias_c ? fmt::format("; bias c {:.3g}, c_magnitude {:.3g}", *c.bias_c,
                                                    c.bias_c_magnitude.value_or(stats::BiasThresholds{}.c_magnitude))
                                      : std::string(),
                             c.created_at, c.created_by);
  }
}

// The cases this shard runs, and an ERROR result for each file that failed to load: in the
// first shard (or where a filter matches its path), while the other controls run (one alias
// bomb or invalid byte in the folder used to refuse the whole nightly).
std::vector<contract::TestCase> shard_cases(const NightlyOptions& o, runner::Shard shard, kernels::Registry& registry,
                                            const runner::SuitePolicy& policy, std::vector<engine::CaseResult>& load_errors) {
  std::vector<runner::LoadFailure> failures;
  auto selected = runner::select_shard(load_cases(o.paths, registry, o.profile, policy, &failures), o.filters, shard);
  for (const auto& f : failures) {
    if (shard.index == 0 && runner::any_filter_matches(o.filters, f.file)) load_errors.push_back(runner::load_failure_result(f));
  }
  if (selected.empty() && load_errors.empty()) throw InputError("no control matches the filters in this shard");
  return selected;
}

// The run spooled (and stored when the database is wanted): the results, load errors first.
std::vector<engine::CaseResult> run_and_store(const NightlyOptions& o, const std::vector<contract::TestCase>& cases,
                                              const std::vector<engine::CaseResult>& load_errors, runner::RunStorage& storage,
                                              const kernels::Registry& registry, const runner::SuitePolicy& policy) {
  engine::RunOptions options;
  if (o.replicates > 0) options.replicates = o.replicates;
  options.device = o.device;
  for (const auto& r : load_errors) {
    storage.store(r);
    if (!o.quiet) std::cerr << "kcert: " << text::terminal_safe(r.testcase.id) << ": ERROR (" << text::terminal_safe(r.error) << ")\n";
  }
  // Storage sees each result as it comes and finishes the run record at the end.
  auto results = run_cases(cases, registry, options, policy, o.quiet, {&storage});
  results.insert(results.begin(), load_errors.begin(), load_errors.end());
  return results;
}

runner::StorageOptions storage_options(const NightlyOptions& o, runner::Shard shard) {
  runner::StorageOptions so;
  so.kcert_version = KCERT_VERSION;
  so.git_revision = kGitRevision;
  so.note = print_note;
  so.db = !o.no_db;
  so.force = true;
  so.run_id = o.run_id;
  so.spool_dir = o.spool_dir;
  so.profile = o.profile;
  so.shard_index = shard.index;
  so.shard_count = shard.count;
  so.configuration = {{"cases", o.paths}, {"filters", o.filters}, {"replicates", o.replicates}, {"device", o.device}, {"command", "nightly"}};
  return so;
}

// `kcert nightly`: this shard's controls run and stored; the report when the run is complete.
int run_nightly(const NightlyOptions& o, kernels::Registry& registry, const runner::SuitePolicy& policy) {
  const auto started = std::chrono::steady_clock::now();
  const auto shard = runner::parse_shard(o.shard);
  if (shard.count > 1 && o.run_id.empty()) {
    throw UsageError("--shard " + o.shard + ": the shards of one run must share an id; pass --run-id (e.g. the "
                     "scheduler's job id)");
  }
  std::vector<engine::CaseResult> load_errors;
  auto cases = shard_cases(o, shard, registry, policy, load_errors);
  const auto env = store::detect_environment();
  const auto db = open_database(o);
  if (db && !o.run_id.empty()) runner::check_run_takes_shard(*db, o.run_id, shard);
  if (db) calibrate_cases(*db, env, cases);
  runner::RunStorage storage(storage_options(o, shard));
  const auto results = run_and_store(o, cases, load_errors, storage, registry, policy);
  const auto& run_id = storage.run().run_id;
  const auto seconds_so_far = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); };
  if (db && storage.database_ok()) {
    const auto summary = db->run_summary(run_id);
    if (summary && static_cast<int>(summary->shards_finished.size()) < summary->shard_count) {
      std::cout << fmt::format("shard {}/{} of run {} stored ({} control(s)); {} of {} shard(s) have reported. The last "
                               "shard prints the merged table; or run: kcert nightly --finish {}\n",
                               shard.index + 1, shard.count, run_id, results.size(), summary->shards_finished.size(),
                               summary->shard_count, run_id);
      const bool error = std::any_of(results.begin(), results.end(), [](const auto& r) { return !r.error.empty(); });
      return error ? exit_input_error : exit_ok;
    }
    auto run = read_run(*db, run_id);
    if (shard.count == 1) run.seconds = seconds_so_far();
    const bool here = run.environments.size() == 1 && run.environments.front() == env.fingerprint;
    return write_report(run, {o.junit, here ? store::describe_environment(env) : std::string()}, report_folder(o, run_id), o.quiet);
  }
  // No database: this process's own results, nothing to compare with.
  auto run = runner::run_from_results(results, storage.run(), storage.spool_path(), env);
  if (shard.count == 1) run.seconds = seconds_so_far();
  const int code = write_report(run, {o.junit, store::describe_environment(env)}, report_folder(o, run_id), o.quiet);
  if (code != exit_ok || o.no_db) return code;
  // A nightly that stored nothing and compared nothing must not look like a good night.
  std::cout << "attention: the database was unavailable: nothing stored, nothing compared with the last run; "
               "upload later with: kcert upload "
            << storage.spool_path() << "\n";
  return exit_input_error;
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
    const int code = o->finish.empty() ? run_nightly(*o, registry, policy) : finish_run(*o);
    if (code != exit_ok) throw ExitWith(code);
  });
}

}  // namespace kcert::cli
