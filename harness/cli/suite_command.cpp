#include "harness/cli/suite_command.hpp"

#include <chrono>

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "eval/falsifiability.hpp"
#include "harness/cli/exit_codes.hpp"
#include "harness/cli/flag_checks.hpp"
#include "harness/report/tables.hpp"
#include "harness/report/junit.hpp"
#include "harness/cli/run_cases_command.hpp"
#include "harness/store/json.hpp"

namespace kcert::cli {

namespace {

struct SuiteOptions {
  std::vector<std::string> paths{"testcases"};
  std::vector<std::string> filters;
  std::string profile;
  std::string json_path;
  std::string junit_path;
  std::uint64_t replicates = 0;
  std::string device = "cpu";
  bool quiet = false;
};

}  // namespace

void register_suite_command(CLI::App& app, kernels::Registry& registry, const runner::SuitePolicy& policy) {
  auto o = std::make_shared<SuiteOptions>();
  auto* cmd = app.add_subcommand("suite", "Run the control suite and print the falsifiability table (no database needed)");
  cmd->footer(
      "Negative controls replay real published defects and must be detected (some gate WARN or\n"
      "FAIL); positive controls are known-correct variants and must not FAIL. Beside the three\n"
      "gates the table shows what today's checks say on the same replicates: torch.testing\n"
      "assert_close with its default tolerances, FlashAttention's max-error rule and\n"
      "torch._dynamo's fp64 RMSE rule (docs/baselines.md).\n\n"
      "Example: kcert suite testcases --profile smoke --json suite.json\n"
      "Exit status: 0 every control met its YAML expectation, 1 some did not, 2 bad input or\n"
      "harness error.");
  cmd->add_option("dirs", o->paths, "control folders or files")->capture_default_str();
  cmd->add_option("--profile", o->profile, "apply each control's profiles.<name> (CI uses smoke)");
  add_filter_option(cmd, o->filters);
  cmd->add_option("--json", o->json_path, "write results and the table as JSON");
  cmd->add_option("--junit", o->junit_path, "write JUnit XML: one testcase per control, failing when it misses its expectation");
  cmd->add_option("--replicates", o->replicates, "override R for every control (3 to 2^20)")->check(replicate_count());
  cmd->add_option("--device", o->device, "where kernels run (cuda needs a CUDA LibTorch, docs/gpu.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_flag("--quiet", o->quiet, "no progress lines on stderr");
  cmd->callback([o, &registry, &policy]() {
    const auto started = std::chrono::steady_clock::now();
    const auto cases = selected_cases(load_cases(o->paths, registry, o->profile, policy), o->filters);
    engine::RunOptions options;
    if (o->replicates > 0) options.replicates = o->replicates;
    options.device = o->device;
    // The JSON file (results and the table) is rewritten after every case, JUnit at the end.
    runner::JsonFileSink json(o->json_path, [](const std::vector<engine::CaseResult>& done) {
      auto doc = store::results_document(done, KCERT_VERSION);
      doc["falsifiability"] = eval::to_json(eval::tabulate(done));
      return doc;
    });
    report::JunitSink junit(o->junit_path, "kcert suite" + (o->profile.empty() ? std::string() : " (" + o->profile + ")"));
    runner::Sinks sinks;
    if (!o->json_path.empty()) sinks.push_back(&json);
    if (!o->junit_path.empty()) sinks.push_back(&junit);
    const auto results = run_cases(cases, registry, options, policy, o->quiet, sinks);
    const auto table = eval::tabulate(results);
    std::vector<eval::ControlOutcome> outcomes;
    for (const auto& r : results) outcomes.push_back(eval::outcome(r));
    report::print_controls(std::cout, outcomes);
    report::print_falsifiability(std::cout, table);
    std::cout << "\n" << report::tally_line(table, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()) << "\n";
    if (table.errors > 0) throw ExitWith(exit_input_error);
    if (!table.unexpected.empty()) throw ExitWith(exit_finding);
  });
}

}  // namespace kcert::cli
