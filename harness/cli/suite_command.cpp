#include "harness/cli/suite_command.hpp"

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "eval/falsifiability.hpp"
#include "harness/cli/exit_codes.hpp"
#include "harness/cli/run_cases_command.hpp"
#include "harness/store/json.hpp"

namespace kcert::cli {

namespace {

struct SuiteOptions {
  std::vector<std::string> paths{"testcases"};
  std::string profile;
  std::string json_path;
  std::uint64_t replicates = 0;
  bool quiet = false;
};

std::string v(stats::Verdict x) { return std::string(stats::to_string(x)); }
std::string flag(bool f) { return f ? "flag" : "-"; }

void print_controls(std::ostream& out, const std::vector<engine::CaseResult>& results) {
  std::size_t w = 7;
  for (const auto& r : results) w = std::max(w, r.testcase.id.size());
  w = std::min<std::size_t>(w, 48);
  out << fmt::format("{:<{}}  {:<8} {:<9} {:<7} {:<7} {:<8} {:<7} {:<8} {:<6} {:<6} {:<6} {}\n", "control", w, "kind",
                     "family", "algebra", "bias", "variance", "all", "bias+M", "close", "FA", "dynamo", "expected");
  for (const auto& r : results) {
    const auto& tc = r.testcase;
    if (!r.error.empty()) {
      out << fmt::format("{:<{}}  {:<8} {:<9} ERROR: {}\n", tc.id.substr(0, w), w, testcase::to_string(tc.kind), tc.family,
                         r.error);
      continue;
    }
    out << fmt::format("{:<{}}  {:<8} {:<9} {:<7} {:<7} {:<8} {:<7} {:<8} {:<6} {:<6} {:<6} {}\n", tc.id.substr(0, w), w,
                       testcase::to_string(tc.kind), tc.family, v(r.algebra.verdict), v(r.bias.verdict),
                       v(r.variance.verdict), v(r.verdict), v(eval::bias_with_magnitude(r)),
                       flag(r.baselines.assert_close.flagged), flag(r.baselines.flash_attention.flagged),
                       flag(r.baselines.dynamo_fp64.flagged), r.unexpected.empty() ? "ok" : "UNEXPECTED");
  }
}

void print_summary(std::ostream& out, const eval::Falsifiability& f) {
  const auto row = [&](const std::string& name, const eval::Tally& t, bool warn) {
    out << fmt::format("  {:<34} {:>3}/{:<3}       {:>3}/{:<3}       {}\n", name, t.detected, f.negatives, t.false_fail,
                       f.positives, warn ? fmt::format("{:>3}/{:<3}", t.false_warn, f.positives) : std::string("  -"));
  };
  out << fmt::format("\nfalsifiability ({} negative, {} positive controls)\n", f.negatives, f.positives);
  out << fmt::format("  {:<34} {:<15} {:<15} {}\n", "", "negatives", "positives", "positives");
  out << fmt::format("  {:<34} {:<15} {:<15} {}\n", "", "detected", "FAIL", "WARN");
  row("algebra gate", f.algebra, true);
  row("bias gate (deciding statistics)", f.bias, true);
  row("variance gate", f.variance, true);
  row("combined", f.combined, true);
  row("bias gate, magnitude deciding too", f.bias_with_magnitude, true);
  row("combined, magnitude deciding too", f.combined_with_magnitude, true);
  out << "  notes' reference (30 + 35 controls): 29/30 detected, 0/35 FAIL, 2/35 WARN\n";
  out << "  checks in use today (flagged on the first replicate):\n";
  row("  assert_close (bf16 rtol 1.6e-2)", f.assert_close, false);
  row("  FlashAttention 2x + 1 ULP rule", f.flash_attention, false);
  row("  dynamo fp64 RMSE 3x rule", f.dynamo_fp64, false);
  out << fmt::format("expectations met: {}/{}\n", f.expectations_met, f.negatives + f.positives + f.errors);
  for (const auto& u : f.unexpected) out << "  UNEXPECTED " << u << "\n";
}

}  // namespace

void register_suite_command(CLI::App& app, kernels::Registry& registry) {
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
  cmd->add_option("--json", o->json_path, "write results and the table as JSON");
  cmd->add_option("--replicates", o->replicates, "override R for every control");
  cmd->add_flag("--quiet", o->quiet, "no progress lines on stderr");
  cmd->callback([o, &registry]() {
    const auto cases = load_cases(o->paths, registry, o->profile);
    engine::RunOptions options;
    if (o->replicates > 0) options.replicates = o->replicates;
    const auto write = [&](const std::vector<engine::CaseResult>& done) {
      if (o->json_path.empty()) return;
      auto doc = store::results_document(done, KCERT_VERSION);
      doc["falsifiability"] = eval::to_json(eval::tabulate(done));
      store::write_json_file(o->json_path, doc);
    };
    const auto results = run_cases(cases, registry, options, o->quiet, write);
    const auto table = eval::tabulate(results);
    print_controls(std::cout, results);
    print_summary(std::cout, table);
    if (table.errors > 0) throw ExitWith(exit_input_error);
    if (!table.unexpected.empty()) throw ExitWith(exit_finding);
  });
}

}  // namespace kcert::cli
