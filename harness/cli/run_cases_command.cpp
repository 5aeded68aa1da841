#include "harness/cli/run_cases_command.hpp"
#include "harness/cli/terminal_text.hpp"
#include "harness/cli/junit.hpp"
#include "harness/cli/resources.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <set>

#include "harness/cli/exit_codes.hpp"
#include "harness/cli/flag_checks.hpp"
#include "harness/cli/khat_reader.hpp"
#include "harness/cli/report.hpp"
#include "harness/cli/run_storage.hpp"
#include "harness/engine/engine.hpp"
#include "harness/engine/isolated.hpp"
#include "harness/kernels/plugin.hpp"
#include "harness/numerics/runtime.hpp"
#include "harness/store/json.hpp"
#include "harness/store/postgres.hpp"
#include "harness/store/spool.hpp"

namespace kcert::cli {

namespace {
bool g_case_plugins_allowed = false;
CaseIsolation g_isolation;
}  // namespace

void set_case_isolation(const CaseIsolation& isolation) { g_isolation = isolation; }

void allow_case_plugins(bool allowed) { g_case_plugins_allowed = allowed; }
bool case_plugins_allowed() { return g_case_plugins_allowed; }

void load_plugins(const std::vector<std::string>& paths, kernels::Registry& registry) {
  for (const auto& p : paths) {
    if (p.empty()) continue;
    try {
      const auto loaded = kernels::load_plugin(p, registry);
      if (!loaded.name.empty()) {
        // A plugin's name and version are its own strings: escaped before they reach a terminal.
        std::cerr << fmt::format("kcert: plugin {} {} loaded from {} ({} variant(s), {} family(ies))\n", terminal_safe(loaded.name),
                                 terminal_safe(loaded.version), terminal_safe(loaded.path), loaded.variants_added, loaded.families_added);
      }
    } catch (const kernels::PluginError& e) {
      throw InputError(e.what());
    }
  }
}

namespace {
// The default folder `testcases` when the command runs outside a checkout: the controls
// installed beside the binary (cmake --install puts them in DATADIR/kcert/testcases).
std::vector<std::string> with_installed_controls(std::vector<std::string> paths) {
  if (paths.size() != 1 || paths.front() != "testcases" || std::filesystem::exists("testcases")) return paths;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return paths;
  const auto installed = (exe.parent_path() / KCERT_BIN_TO_CONTROLS).lexically_normal();
  if (!std::filesystem::is_directory(installed)) return paths;
  std::cerr << "kcert: no ./testcases here; using the installed controls in " << installed.string() << "\n";
  return {installed.string()};
}
}  // namespace

std::vector<contract::TestCase> load_cases(const std::vector<std::string>& given_paths, kernels::Registry& registry,
                                           const std::string& profile, std::vector<LoadFailure>* failures) {
  const auto paths = with_installed_controls(given_paths);
  std::vector<std::string> files;
  try {
    files = testcase::collect_testcase_files(paths);
  } catch (const testcase::LoadError& e) {
    throw InputError(e.what());
  }
  std::string errors;
  std::set<std::string> failed;  // files already refused
  const auto refuse = [&](const std::string& file, std::string why) {
    failed.insert(file);
    if (failures) failures->push_back({file, std::move(why)});
    else errors += why + "\n";
  };
  // A case file naming a plugin would run that library's code on `kcert run x.yaml`; it loads
  // only what the user already named (--plugin, KCERT_PLUGINS) unless they trust case files.
  for (const auto& f : files) {
    try {
      const auto plugins = testcase::plugin_paths(f);
      for (const auto& p : plugins) {
        std::error_code ec;
        const auto canonical = std::filesystem::weakly_canonical(p, ec).string();
        if (!case_plugins_allowed() && !registry.has_plugin(canonical)) {
          throw InputError(f + ": plugins: names " + p +
                           ", and a case file does not load code on its own; name it yourself with --plugin " + p +
                           " (or KCERT_PLUGINS), or pass --allow-case-plugins to trust every case's plugins (docs/plugins.md)");
        }
      }
      load_plugins(plugins, registry);
    } catch (const InputError& e) {
      if (!failures) throw;
      refuse(f, e.what());
    } catch (const testcase::LoadError& e) {
      if (!failures) throw InputError(e.what());
      refuse(f, e.what());
    }
  }
  testcase::FamilySchemas schemas;
  for (const auto& name : registry.family_names()) schemas.emplace(name, registry.family(name).schema());
  if (files.empty()) throw InputError("no test cases found (looked for *.yaml and *.yml in the given paths)");
  std::vector<contract::TestCase> cases;
  std::map<std::string, std::string> seen;
  for (const auto& f : files) {
    if (failed.count(f)) continue;
    try {
      // One case per direction the file certifies (`direction: both`: two), refused together.
      auto loaded = testcase::load_testcases(f, schemas, profile);
      std::string why;
      for (const auto& tc : loaded) {
        if (const auto it = seen.find(tc.id); it != seen.end()) {
          why = f + ": id: '" + tc.id + "' is already used by " + it->second;
          break;
        }
        // Refused before anything is allocated: a shape typo must not take the machine down.
        if (const auto refusal = memory_refusal(tc, registry)) {
          why = f + ": " + *refusal;
          break;
        }
      }
      if (!why.empty()) {
        refuse(f, why);
        continue;
      }
      for (auto& tc : loaded) {
        seen.emplace(tc.id, f);
        cases.push_back(std::move(tc));
      }
    } catch (const testcase::LoadError& e) {
      refuse(f, e.what());
    }
  }
  if (!errors.empty()) {
    errors.pop_back();
    throw InputError(errors);
  }
  // A profile no case defines is a typo, not a request for contract shapes under a new name.
  if (!profile.empty() && !cases.empty()) {
    std::set<std::string> defined;
    for (const auto& tc : cases) defined.insert(tc.profiles.begin(), tc.profiles.end());
    if (!defined.count(profile)) {
      std::string names;
      for (const auto& d : defined) names += (names.empty() ? "" : ", ") + d;
      throw UsageError("--profile " + profile + ": no case defines this profile (defined: " +
                       (names.empty() ? std::string("none") : names) + ")");
    }
  }
  return cases;
}

engine::CaseResult load_failure_result(const LoadFailure& failure) {
  engine::CaseResult r;
  r.testcase.id = failure.file;
  r.testcase.source = failure.file;
  r.error = "cannot load the case file: " + failure.reason;
  r.verdict = stats::Verdict::fail;
  r.torch_version = numerics::torch_version();
  return r;
}

namespace {

struct RunOptionsCli {
  std::vector<std::string> paths;
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

// Progress on stderr: a rewritten line on a terminal, a line every 10 s otherwise.
class ProgressPrinter {
 public:
  ProgressPrinter(std::size_t total, bool quiet) : total_(total), quiet_(quiet), tty_(::isatty(STDERR_FILENO) != 0) {}
  void start(std::size_t index) { index_ = index; last_ = -1e9; }
  void update(const engine::Progress& p) {
    if (quiet_) return;
    if (!tty_ && p.seconds - last_ < 10.0) return;
    last_ = p.seconds;
    const auto line = fmt::format("[{}/{}] {}: {}/{} replicates, {:.1f} s", index_ + 1, total_, terminal_safe(*p.case_id), p.done,
                                  p.target, p.seconds);
    if (tty_) std::cerr << "\r\033[K" << line << std::flush;
    else std::cerr << line << "\n";
  }
  void finish(const engine::CaseResult& r) {
    if (quiet_) return;
    if (tty_) std::cerr << "\r\033[K";
    if (!r.skipped.empty()) {
      std::cerr << fmt::format("[{}/{}] {}: SKIP ({})\n", index_ + 1, total_, terminal_safe(r.testcase.id), terminal_safe(r.skipped));
      return;
    }
    std::cerr << fmt::format("[{}/{}] {}: {} ({} replicates, {:.1f} s)\n", index_ + 1, total_, terminal_safe(r.testcase.id),
                             r.error.empty() ? std::string(stats::to_string(r.verdict)) : "ERROR", r.replicates,
                             r.runtime.seconds);
  }

 private:
  std::size_t total_;
  bool quiet_;
  bool tty_;
  std::size_t index_ = 0;
  double last_ = -1e9;
};

// The reason a case cannot run in this build: a variant it names is registered but
// unavailable (a kernel of a newer LibTorch). Empty when both run.
std::string unavailable_reason(const contract::TestCase& tc, const kernels::Registry& registry) {
  const auto* family = registry.find_family(tc.family);
  if (!family) return {};
  std::string why;
  for (const auto* side : {&tc.reference, &tc.production}) {
    const auto it = family->variants.find(side->variant);
    if (it != family->variants.end() && !it->second.unavailable.empty()) {
      why += (why.empty() ? "" : "; ") + side->variant + ": " + it->second.unavailable;
    }
  }
  return why;
}

}  // namespace

std::vector<engine::CaseResult> run_cases(const std::vector<contract::TestCase>& cases, const kernels::Registry& registry,
                                          engine::RunOptions options, bool quiet,
                                          const std::function<void(const std::vector<engine::CaseResult>&)>& after_each) {
  ProgressPrinter progress(cases.size(), quiet);
  options.progress = [&progress](const engine::Progress& p) { progress.update(p); };
  std::vector<engine::CaseResult> results;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    progress.start(i);
    if (auto why = unavailable_reason(cases[i], registry); !why.empty()) {
      engine::CaseResult skipped;
      skipped.testcase = cases[i];
      skipped.skipped = std::move(why);
      skipped.torch_version = numerics::torch_version();
      results.push_back(std::move(skipped));
      progress.finish(results.back());
      if (after_each) after_each(results);
      continue;
    }
    const auto failed = [&](std::string why) {
      engine::CaseResult r;
      r.testcase = cases[i];
      r.error = std::move(why);
      r.verdict = stats::Verdict::fail;
      return r;
    };
    // Plugin kernels run in a child process: a crash, exit(), abort or hang there ends this
    // case as ERROR, not the run (engine/isolated.hpp).
    const bool from_plugin = engine::kernels_from_plugin(cases[i], registry);
    const bool isolate = g_isolation.mode == CaseIsolation::Mode::all ||
                         (g_isolation.mode == CaseIsolation::Mode::plugins && from_plugin);
    try {
      if (isolate) {
        engine::IsolationOptions io;
        io.deadline_seconds = g_isolation.deadline_seconds;
        io.who = from_plugin ? "plugin kernel" : "case";
        results.push_back(engine::run_case_isolated(cases[i], registry, options, io));
      } else {
        results.push_back(engine::run_case(cases[i], registry, options));
      }
    } catch (const std::exception& e) {
      if (options.device == "cuda" && std::string(e.what()).find("--device cuda") != std::string::npos) throw UsageError(e.what());
      results.push_back(failed(e.what()));
    } catch (...) {
      results.push_back(failed("the case threw an exception that is not a std::exception"));
    }
    progress.finish(results.back());
    if (after_each) after_each(results);
  }
  return results;
}

void register_run_command(CLI::App& app, kernels::Registry& registry) {
  auto o = std::make_shared<RunOptionsCli>();
  auto* cmd = app.add_subcommand("run", "Run test cases (YAML files or folders) through the three gates");
  cmd->footer(
      "Each case names a (reference, production) kernel pair of a registered family and a probe\n"
      "contract (docs/testcases.md). kcert evaluates both under the working precision and the\n"
      "reference under fp64 (the oracle) on R replicates, then reports:\n"
      "  algebra   both variants under the fp64 policy on the first replicates: same function?\n"
      "  bias      per-bucket z-test of mean(prod - ref) with an effect floor and a ULP floor\n"
      "  variance  GPD return level of K-hat = (E_prod - 1 ULP)/E_ref at the training horizon\n\n"
      "Examples:\n"
      "  kcert run testcases/negative/rmsnorm/n1_gemma_rmsnorm_offset_bf16.yaml\n"
      "  kcert run testcases --profile smoke --json results.json\n\n"
      "Exit status: 0 no case FAILed (with --expect: every case met its YAML expectation),\n"
      "1 a case FAILed (with --expect: some case did not meet its expectation), 2 bad input or\n"
      "harness error.");
  cmd->add_option("cases", o->paths, "test-case files or folders (searched recursively for *.yaml)")->required();
  cmd->add_option("--json", o->json_path, "also write the results as JSON to this file (docs/results.md)");
  cmd->add_option("--junit", o->junit_path, "also write JUnit XML: one testcase per case, failing when it misses its "
                                            "expectation (or, without one, when it FAILs)");
  cmd->add_option("--replicates", o->replicates, "override R, the pre-declared replicate count of every case (2 to 2^20)")
      ->check(replicate_count());
  cmd->add_option("--seed", o->seed, "override every case's probe seed (>= 0)")
      ->check(seed_value())
      ->each([o](const std::string&) { o->seed_given = true; });
  cmd->add_option("--device", o->device, "where kernels run")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  cmd->add_option("--profile", o->profile, "apply each case's profiles.<name> overrides (e.g. smoke)");
  cmd->add_option("--batch", o->batch, "replicates per kernel call (default: automatic)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--quiet", o->quiet, "no progress lines on stderr");
  cmd->add_flag("--brief", o->brief, "print the verdict table only");
  cmd->add_flag("--expect", o->expect, "exit 1 when a case's verdicts differ from its YAML expectation");
  cmd->add_flag("--db", o->db, "store results in PostgreSQL (KCERT_DB or PG* variables), spooling each first");
  cmd->add_option("--spool", o->spool, "spool file (default with --db: $KCERT_HOME/spool/RUN_ID.jsonl; KCERT_HOME defaults to .kcert)");
  cmd->add_option("--run-id", o->run_id, "run id to record (default: a new one); shards of one run share it");
  cmd->callback([o, &registry]() {
    const auto cases = load_cases(o->paths, registry, o->profile);
    engine::RunOptions options;
    if (o->replicates > 0) options.replicates = o->replicates;  // checked by replicate_count()
    if (o->seed_given) options.seed = o->seed;
    options.device = o->device;
    options.batch = o->batch;
    StorageOptions so;
    so.db = o->db;
    so.spool = o->spool;
    so.run_id = o->run_id;
    so.profile = o->profile;
    so.configuration = {{"cases", o->paths}, {"replicates", o->replicates}, {"device", o->device}};
    RunStorage storage(so);
    const auto results = run_cases(cases, registry, options, o->quiet, [&](const std::vector<engine::CaseResult>& done) {
      storage.store(done.back());
      // Keep what is done on disk after every case: an interrupted run loses nothing.
      if (!o->json_path.empty()) store::write_json_file(o->json_path, store::results_document(done, KCERT_VERSION));
    });
    if (!o->junit_path.empty()) {
      std::vector<nlohmann::json> docs;
      for (const auto& r : results) docs.push_back(store::to_json(r));
      write_junit(o->junit_path, docs, "kcert run");
    }
    bool harness_error = false;
    for (const auto& r : results) harness_error |= !r.error.empty();
    storage.finish("finished");
    print_verdict_table(std::cout, results);
    if (!o->brief) {
      for (const auto& r : results) print_case_details(std::cout, r);
    } else {
      // The table only says ERROR; the reason must not need a second run without --brief.
      for (const auto& r : results) {
        if (!r.error.empty()) std::cout << terminal_safe(r.testcase.id) << ": ERROR: " << terminal_safe(r.error) << "\n";
      }
    }
    for (const auto& r : results) {
      if (!r.skipped.empty()) std::cout << terminal_safe(r.testcase.id) << ": SKIP: " << terminal_safe(r.skipped) << "\n";
    }
    if (harness_error) throw ExitWith(exit_input_error);
    bool finding = false;
    for (const auto& r : results) finding |= r.ran() && (o->expect ? !r.unexpected.empty() : r.verdict == stats::Verdict::fail);
    if (finding) throw ExitWith(exit_finding);
  });
}

}  // namespace kcert::cli
