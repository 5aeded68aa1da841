#include "harness/cli/tail_fit_command.hpp"

#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <string>

#include "harness/cli/exit_codes.hpp"
#include "harness/cli/flag_checks.hpp"
#include "harness/report/khat_csv.hpp"
#include "harness/store/json.hpp"
#include "harness/stats/tail.hpp"

namespace kcert::cli {

namespace {

std::string num(double v) {
  if (std::isnan(v)) return "-";
  if (std::isinf(v)) return v > 0 ? "+inf" : "-inf";
  return fmt::format("{:.6g}", v);
}

void print_table(std::ostream& out, const std::string& source, const stats::TailAnalysis& a) {
  const auto& s = a.settings;
  auto row = [&](std::string_view key, const std::string& value) {
    out << fmt::format("{:<22}{}\n", key, value);
  };
  row("K-hat sample", source);
  row("replicates", fmt::format("{} replicates", a.khat.count));
  row("zeros", fmt::format("{} replicates ({:.1f} %)", a.khat.zeros, 100.0 * a.khat.zero_fraction));
  if (a.khat.infinite > 0) row("infinite K-hat", fmt::format("{} replicates", a.khat.infinite));
  row("K-hat quantiles", fmt::format("q50 {}  q90 {}  q99 {}  max {}  (ratio E_prod/E_ref)",
                                     num(a.khat.q50), num(a.khat.q90), num(a.khat.q99), num(a.khat.max)));
  if (a.mode == stats::TailMode::thin_tail || a.mode == stats::TailMode::fitted) {
    row("threshold u", fmt::format("{}  (q{:g} of the positive K-hat)", num(a.u), s.tail_q));
    row("exceedances", fmt::format("{} replicates  (zeta = {} per replicate)", a.n_exc, num(a.zeta)));
  }
  if (a.mode == stats::TailMode::fitted) {
    row("xi (free MLE)", num(a.free_fit->xi) + (a.free_fit->at_lower_bound ? "  (at bound -1)" : ""));
    row("xi (clipped <= 0)", num(a.clipped_fit->xi));
    row("sigma", num(a.clipped_fit->sigma));
    row("return level r_T", fmt::format("{}  (horizon T = {:g} replicates)", num(a.r_t), s.horizon));
    row("bootstrap se", fmt::format("{}  ({} of {} resamples, {})", num(a.se), a.bootstrap_used,
                                    s.bootstrap, stats::to_string(s.bootstrap_kind)));
    row("r_T bounds", fmt::format("[{}, {}]  (one-sided {:g} each, profile likelihood)", num(a.lower), num(a.U), s.level));
    row("U", num(a.U));
  } else if (a.mode == stats::TailMode::thin_tail) {
    row("U (empirical max)", num(a.U));
  }
  row("verdict", fmt::format("{}  (warn_K {:g}, fail_K {:g})", stats::to_string(a.verdict), s.warn_k, s.fail_k));
  row("reason", a.reason);
}

struct TailFitOptions {
  std::vector<std::string> files;
  stats::VarianceSettings settings;
  std::string bootstrap_kind = "exceedances";
  bool json = false;
};

// Each file analysed alone, as a table or one JSON line per file.
void tail_fit(const TailFitOptions& o) {
  auto settings = o.settings;
  settings.bootstrap_kind = o.bootstrap_kind == "full" ? stats::BootstrapKind::full : stats::BootstrapKind::exceedances;
  try {
    stats::validate(settings);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  bool first = true;
  for (const auto& file : o.files) {
    const auto analysis = stats::analyze_tail(report::read_khat_file(file), settings);
    if (o.json) {
      auto j = store::to_json(analysis);
      j["format"] = "kcert-tail-fit/1";  // docs/schema/kcert-tail-fit-1.schema.json
      j["kcert_version"] = KCERT_VERSION;
      j["source"] = file;
      std::cout << j.dump() << "\n";
    } else {
      if (!first) std::cout << "\n";
      print_table(std::cout, file == "-" ? "<stdin>" : file, analysis);
    }
    first = false;
  }
}

}  // namespace

void register_tail_fit_command(CLI::App& app) {
  auto opts = std::make_shared<TailFitOptions>();
  auto* cmd = app.add_subcommand("tail-fit", "Variance-gate analysis of a stored K-hat sample");
  cmd->footer(
      "K-hat_r = max(0, (E_prod - eps)/E_ref) per replicate; the gate fits a generalized\n"
      "Pareto tail above the tail_q quantile of the positive K-hat, clips the shape to\n"
      "xi <= 0, and judges U, the one-sided 0.99 upper bound on the return level r_T at the\n"
      "horizon (profile likelihood; needs 50 exceedances, else the maximum is judged as a\n"
      "thin tail), against warn_K / fail_K (docs/statistics.md).\n\n"
      "With several files each is analysed alone; --json prints one JSON line per file\n"
      "(JSON Lines, in the order given), so a simulation can feed many samples at once.\n\n"
      "Examples:  kcert tail-fit khat.txt --warn-k 2 --fail-k 10\n"
      "           kcert tail-fit samples/*.txt --json > tails.jsonl\n"
      "Exit status: 0 analysed (whatever the verdict), 2 bad input.");
  cmd->add_option("files", opts->files, "K-hat files, one value per line ('inf' allowed, '#' comments; '-' = stdin)")
      ->required();
  cmd->add_option("--warn-k", opts->settings.warn_k, "PASS when U <= warn_K")->capture_default_str();
  cmd->add_option("--fail-k", opts->settings.fail_k, "FAIL when U > fail_K (WARN between)")->capture_default_str();
  cmd->add_option("--horizon", opts->settings.horizon, "training horizon T in replicates (one optimizer step)")
      ->capture_default_str();
  cmd->add_option("--tail-q", opts->settings.tail_q, "threshold u = this quantile of the positive K-hat")
      ->capture_default_str();
  cmd->add_option("--bootstrap", opts->settings.bootstrap, "bootstrap resamples B for se (0: none)")
      ->check(integer_in(0, 1000000, "0 <= B <= 1000000"))
      ->capture_default_str();
  cmd->add_option("--bootstrap-kind", opts->bootstrap_kind,
                  "'exceedances' (u, zeta fixed; the method's default) or 'full' (resample all K-hat)")
      ->check(CLI::IsMember({"exceedances", "full"}))
      ->capture_default_str();
  cmd->add_option("--seed", opts->settings.seed, "bootstrap seed")->check(integer_in(0, INT64_MAX, "an integer >= 0"))->capture_default_str();
  cmd->add_option("--level", opts->settings.level, "one-sided level of U, the bound on r_T")->capture_default_str();
  cmd->add_option("--min-exceedances", opts->settings.min_exceedances, "fewer exceedances: thin tail, no fit")
      ->check(integer_in(2, kMaxReplicatesFlag, "2 <= N <= 1048576"))
      ->capture_default_str();
  cmd->add_flag("--json", opts->json, "print JSON (docs/results.md) instead of the table");
  cmd->callback([opts]() { tail_fit(*opts); });
}

}  // namespace kcert::cli
