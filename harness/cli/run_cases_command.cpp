#include "harness/cli/run_cases_command.hpp"
#include "harness/text/escape.hpp"
#include "harness/report/junit.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <iostream>
#include <memory>

#include "harness/cli/exit_codes.hpp"
#include "harness/cli/flag_checks.hpp"
#include "harness/report/khat_csv.hpp"
#include "harness/report/tables.hpp"
#include "harness/cli/build_info.hpp"
#include "harness/runner/run_storage.hpp"
#include "harness/engine/engine.hpp"
#include "harness/store/json.hpp"
#include "harness/store/postgres.hpp"
#include "harness/store/spool.hpp"

namespace kcert::cli {

void print_note(const std::string& note) { std::cerr << "kcert: " << text::terminal_safe(note) << "\n"; }

std::vector<contract::TestCase> selected_cases(std::vector<contract::TestCase> cases, const std::vector<std::string>& filters) {
  const bool any = !cases.empty();
  auto kept = runner::filter_cases(std::move(cases), filters);
  if (any && kept.empty()) throw UsageError("no case matches --filter (a regular expression on the case id or family)");
  return kept;
}

void add_filter_option(CLI::App* cmd, std::vector<std::string>& filters) {
  // One pattern per --filter: `--filter rope testcases` keeps `testcases` a path.
  cmd->add_option("--filter", filters, "regular expression on case id or family (repeatable; any match)")
      ->allow_extra_args(false);
}

std::vector<contract::TestCase> load_cases(const std::vector<std::string>& paths, kernels::Registry& registry,
                                           const std::string& profile, const runner::SuitePolicy& policy,
                                           std::vector<runner::LoadFailure>* failures) {
  return runner::load_cases(paths, registry, profile, policy, print_note, failures);
}

namespace {

struct RunOptionsCli {
  std::vector<std::string> paths;
  std::vector<std::string> filters;
  std::string json_path;
  std::string junit_path;
  std::uint64_t replicates = 0;
  std::uint64_t seed = 0;
  bool seed_given = false;
  std::string device = "cpu";
  std::string profile;
  std::int64_t batch = 0;
  bool quiet = false;
  bool brief = false;
  bool expect = false;
  bool db = false;
  std::string spool;
  std::string run_id;
};

// Progress on stderr, a sink (runner/sink.hpp): a rewritten line on a terminal, a line every
// 10 s otherwise, and a line per finished case.
class ProgressPrinter : public runner::ResultSink {
 public:
  explicit ProgressPrinter(bool quiet) : quiet_(quiet), tty_(::isatty(STDERR_FILENO) != 0) {}
  void case_started(std::size_t index, std::size_t total) override {
    index_ = index;
    total_ = total;
    last_ = -1e9;
  }
  void progress(const engine::Progress& p) override {
    if (quiet_) return;
    if (!tty_ && p.seconds - last_ < 10.0) return;
    last_ = p.seconds;
    const auto line = fmt::format("[{}/{}] {}: {}/{} replicates, {:.1f} s", index_ + 1, total_, text::terminal_safe(*p.case_id), p.done,
                                  p.target, p.seconds);
    if (tty_) std::cerr << "\r\033[K" << line << std::flush;
    else std::cerr << line << "\n";
  }
  void case_finished(const std::vector<engine::CaseResult>& done) override {
    if (quiet_) return;
    const auto& r = done.back();
    if (tty_) std::cerr << "\r\033[K";
    if (!r.skipped.empty()) {
      std::cerr << fmt::format("[{}/{}] {}: SKIP ({})\n", index_ + 1, total_, text::terminal_safe(r.testcase.id), text::terminal_safe(r.skipped));
      return;
    }
    std::cerr << fmt::format("[{}/{}] {}: {} ({} replicates, {:.1f} s)\n", index_ + 1, total_, text::terminal_safe(r.testcase.id),
                             r.error.empty() ? std::string(stats::to_string(r.verdict)) : "ERROR", r.replicates,
                             r.runtime.seconds);
  }

 private:
  bool quiet_;
  bool tty_;
  std::size_t index_ = 0;
  std::size_t total_ = 0;
  double last_ = -1e9;
};

}  // namespace

std::vector<engine::CaseResult> run_cases(const std::vector<contract::TestCase>& cases, const kernels::Registry& registry,
                                          engine::RunOptions options, const runner::SuitePolicy& policy, bool quiet,
                                          const runner::Sinks& sinks) {
  ProgressPrinter progress(quiet);
  runner::Sinks all{&progress};
  all.insert(all.end(), sinks.begin(), sinks.end());
  return runner::run_cases(cases, registry, std::move(options), policy, all);
}

namespace {

constexpr const char* kRunHelp =
      "Each case names a (reference, production) kernel pair of a registered family and a probe\n"
      "contract (docs/testcases.md). kcert evaluates both under the working precision and the\n"
      "reference under fp64 (the oracle) on R replicates, then reports:\n"
      "  algebra   both variants under the fp64 policy on the first replicates: same function?\n"
      "  bias      per-bucket z-test of mean(prod - ref) with an effect floor and a ULP floor\n"
      "  variance  GPD return level of K-hat = (E_prod - 1 ULP)/E_ref at the training horizon\n\n"
      "Examples:\n"
      "  kcert run testcases/negative/rmsnorm/n1_gemma_rmsnorm_offset_bf16.yaml\n"
      "  kcert run testcases --profile smoke --json results.json\n\n"
      "Verdicts: PASS, INCONCLUSIVE (the run could not see an effect at a gate's floor: too few\n"
      "replicates; the reason names the R it needs), WARN, FAIL; a case takes its worst gate's.\n\n"
      "Exit status: 0 no case FAILed or was INCONCLUSIVE (with --expect: every case met its YAML\n"
      "expectation), 1 a case FAILed or was INCONCLUSIVE (with --expect: some case did not meet\n"
      "its expectation), 2 bad input or harness error.";

// Where `kcert run` stores its results: the database and spool asked for, named by this run.
runner::StorageOptions storage_options(const RunOptionsCli& o) {
  runner::StorageOptions so;
  so.kcert_version = KCERT_VERSION;
  so.git_revision = kGitRevision;
  so.note = print_note;
  so.db = o.db;
  so.spool = o.spool;
  so.run_id = o.run_id;
  so.profile = o.profile;
  so.configuration = {{"cases", o.paths}, {"replicates", o.replicates}, {"device", o.device}};
  return so;
}

// The verdict table, then each case's details (--brief: only the reasons of ERRORs), then skips.
void print_run(const std::vector<engine::CaseResult>& results, bool brief) {
  report::print_verdict_table(std::cout, results);
  if (!brief) {
    for (const auto& r : results) report::print_case_details(std::cout, r);
  } else {
    // The table only says ERROR; the reason must not need a second run without --brief.
    for (const auto& r : results) {
      if (!r.error.empty()) std::cout << text::terminal_safe(r.testcase.id) << ": ERROR: " << text::terminal_safe(r.error) << "\n";
    }
  }
  for (const auto& r : results) {
    if (!r.skipped.empty()) std::cout << text::terminal_safe(r.testcase.id) << ": SKIP: " << text::terminal_safe(r.skipped) << "\n";
  }
}

// `kcert run`'s exit status, thrown as ExitWith unless it is 0.
void exit_for(const std::vector<engine::CaseResult>& results, bool expect) {
  bool harness_error = false;
  for (const auto& r : results) harness_error |= !r.error.empty();
  if (harness_error) throw ExitWith(exit_input_error);
  bool finding = false;
  // A FAIL is a finding; so is an INCONCLUSIVE case (issue 32): it certified nothing, and a
  // nightly that exits 0 on it would read as a PASS.
  for (const auto& r : results)
    finding |= r.ran() && (expect ? !r.unexpected.empty()
                                  : r.verdict == stats::Verdict::fail || r.verdict == stats::Verdict::inconclusive);
  if (finding) throw ExitWith(exit_finding);
}

void run_command(const RunOptionsCli& o, kernels::Registry& registry, const runner::SuitePolicy& policy) {
  const auto cases = selected_cases(load_cases(o.paths, registry, o.profile, policy), o.filters);
  engine::RunOptions options;
  if (o.replicates > 0) options.replicates = o.replicates;  // checked by replicate_count()
  if (o.seed_given) options.seed = o.seed;
  options.device = o.device;
  options.batch = o.batch;
  runner::RunStorage storage(storage_options(o));
  runner::Sinks sinks{&storage};
  // The JSON file is rewritten after every case: an interrupted run loses nothing.
  runner::JsonFileSink json(o.json_path, [](const auto& done) { return store::results_document(done, KCERT_VERSION); });
  if (!o.json_path.empty()) sinks.push_back(&json);
  report::JunitSink junit(o.junit_path, "kcert run");
  if (!o.junit_path.empty()) sinks.push_back(&junit);
  const auto results = run_cases(cases, registry, options, policy, o.quiet, sinks);
  print_run(results, o.brief);
  exit_for(results, o.expect);
}

}  // namespace

void register_run_command(CLI::App& app, kernels::Registry& registry, const runner::SuitePolicy& policy) {
  auto o = std::make_shared<RunOptionsCli>();
  auto* cmd = app.add_subcommand("run", "Run test cases (YAML files or folders) through the three gates");
  cmd->footer(kRunHelp);

  cmd->add_option("cases", o->paths, "test-case files or folders (searched recursively for *.yaml)")->required();
  cmd->add_option("--json", o->json_path, "also write the results as JSON to this file (docs/results.md)");
  cmd->add_option("--junit", o->junit_path, "also write JUnit XML: one testcase per case, failing when it misses its "
                                            "expectation (or, without one, when it FAILs)");
  cmd->add_option("--replicates", o->replicates, "override R, the pre-declared replicate count of every case (3 to 2^20)")
      ->check(replicate_count());
  cmd->add_option("--seed", o->seed, "override every case's probe seed (>= 0)")
      ->check(seed_value())
      ->each([o](const std::string&) { o->seed_given = true; });
  cmd->add_option("--device", o->device, "where kernels run")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  cmd->add_option("--profile", o->profile, "apply each case's profiles.<name> overrides (e.g. smoke)");
  add_filter_option(cmd, o->filters);
  cmd->add_option("--batch", o->batch, "replicates per kernel call (default: automatic)")
      ->check(integer_in(0, kMaxReplicatesFlag, "0 <= B <= 1048576 (0: automatic)"));
  cmd->add_flag("--quiet", o->quiet, "no progress lines on stderr");
  cmd->add_flag("--brief", o->brief, "print the verdict table only");
  cmd->add_flag("--expect", o->expect, "exit 1 when a case's verdicts differ from its YAML expectation");
  cmd->add_flag("--db", o->db, "store results in PostgreSQL (KCERT_DB or PG* variables), spooling each first");
  cmd->add_option("--spool", o->spool, "spool file (default with --db: $KCERT_HOME/spool/RUN_ID.jsonl; KCERT_HOME defaults to .kcert)");
  cmd->add_option("--run-id", o->run_id, "run id to record (default: a new one); shards of one run share it")
      ->check(run_id_check());
  cmd->callback([o, &registry, &policy]() { run_command(*o, registry, policy); });
}

}  // namespace kcert::cli
