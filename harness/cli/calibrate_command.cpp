// `kcert calibrate`: re-derives the variance gate's warn_K / fail_K and the bias gate's ULP
// floors per operator family for one environment from the stored results of its positive
// controls (method.md §6). The rule (kcert-cal/2) and why are in docs/calibration.md;
// nothing here re-runs a kernel.
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h up to fmt 10, in ranges.h since 11)
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>

#include "eval/calibration.hpp"
#include "eval/falsifiability.hpp"
#include "harness/cli/exit_codes.hpp"
#include "harness/cli/nightly_command.hpp"
#include "harness/stats/tail.hpp"
#include "harness/store/environment.hpp"
#include "harness/store/postgres.hpp"

namespace kcert::cli {

namespace {

struct CalibrateOptions {
  std::string environment;
  std::vector<std::string> runs;
  std::string profile;
  std::string by;
  bool apply = false;
  bool history = false;
};

std::string who(const std::string& given) {
  if (!given.empty()) return given;
  const char* user = std::getenv("USER");
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return std::string(user ? user : "unknown") + "@" + host;
}

std::string u_text(const eval::ControlOutcome& o) {
  if (o.variance_u) return fmt::format("{:.4g}", *o.variance_u);
  return o.variance == stats::Verdict::fail ? "inf" : "-";
}

void print_history(store::ResultStore& db, const std::string& env) {
  const auto cals = db.calibrations(env);
  if (cals.empty()) {
    std::cout << "no calibrations stored" << (env.empty() ? "" : " for environment " + env) << "\n";
    return;
  }
  std::cout << fmt::format("{:<18} {:<18} {:<8} {:<22} {:>8} {:>8} {:>10} {:>4} {:>8} {:>11}  {:<12} {}\n", "environment", "family",
                           "id", "created (UTC)", "warn_K", "fail_K", "prev", "pos", "max U", "bias c S/M", "rule",
                           "by / source runs");
  for (const auto& c : cals) {
    std::string runs;
    for (const auto& r : c.source_runs) runs += (runs.empty() ? "" : ",") + r;
    const auto floors = c.bias_c ? fmt::format("{:.3g}/{:.3g}", *c.bias_c, c.bias_c_magnitude.value_or(0.0)) : std::string("shipped");
    std::cout << fmt::format("{:<18} {:<18} {:<8} {:<22} {:>8.4g} {:>8.4g} {:>4.3g}/{:<5.3g} {:>4} {:>8.4g} {:>11}  {:<12} {} / {}\n",
                             c.fingerprint, c.family, c.label(), c.created_at, c.warn_k, c.fail_k, c.previous_warn_k,
                             c.previous_fail_k, c.positives, c.max_u, floors, c.rule_version, c.created_by, runs);
  }
}

// A run whose evidence is not what its cases declare cannot set thresholds (issue 32): one
// started with --replicates judged every control at an R nobody pre-declared (at R 4 the
// bias cut is so wide that defects PASS, and floors taken from it would be meaningless); an
// INCONCLUSIVE result could not see an effect at its floor; a control that missed its YAML
// expectation means the run did not behave as the suite says it must. Refuses with the run
// and the reason, naming at most a few controls.
void refuse_unfit_source(const std::string& run, const store::RunSummary& summary,
                         const std::vector<store::StoredResult>& results) {
  const auto& cfg = summary.configuration;
  if (const auto it = cfg.find("replicates"); it != cfg.end() && it->is_number_unsigned() && it->get<std::uint64_t>() > 0) {
    throw InputError(fmt::format("run {} cannot be calibrated from: it was started with --replicates {}, so its controls "
                                 "were judged at an R their cases do not declare; calibrate from a run at the cases' own R "
                                 "(`kcert nightly` without --replicates)",
                                 run, it->get<std::uint64_t>()));
  }
  std::vector<std::string> inconclusive, unmet;
  for (const auto& r : results) {
    const auto o = eval::outcome_from_document(r.document);
    // The thresholds come from forward results (below): a backward control that could not
    // see at this R (a per-element dW bucket at smoke shapes) says nothing about them.
    const bool forward = r.document.value("direction", std::string("forward")) == "forward";
    if (forward && o.inconclusive()) inconclusive.push_back(o.id);
    if (!o.unexpected.empty()) unmet.push_back(o.id);
  }
  const auto some = [](const std::vector<std::string>& ids) {
    const std::size_t shown = std::min<std::size_t>(ids.size(), 3);
    return fmt::format("{}{}", fmt::join(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
                       ids.size() > shown ? fmt::format(" and {} more", ids.size() - shown) : std::string());
  };
  if (!inconclusive.empty()) {
    throw InputError(fmt::format("run {} cannot be calibrated from: {} result(s) are INCONCLUSIVE ({}): their evidence could "
                                 "not see an effect at the gate's floor; rerun at the replicates their reasons name",
                                 run, inconclusive.size(), some(inconclusive)));
  }
  if (!unmet.empty()) {
    throw InputError(fmt::format("run {} cannot be calibrated from: {} control(s) missed their YAML expectation ({}); "
                                 "thresholds from a run that did not behave as the suite says would move with it. "
                                 "Fix or explain those first (`kcert history CASE`)",
                                 run, unmet.size(), some(unmet)));
  }
}


constexpr const char* kCalibrateHelp =
      "Rule kcert-cal/2 (docs/calibration.md), per operator family, for one environment:\n"
      "  warn_K = max(1, 1.5 x the largest U of the family's positive controls)\n"
      "  fail_K = 5 x warn_K (the default ratio 10 / 2)\n"
      "  bias floors, per statistic: c = 1.5 x the largest ULP effect of a significant bucket\n"
      "  among the positives, at least 0.05 and at most the shipped floor (signed 0.3, magnitude 0.2)\n"
      "A family is refused, with the reason, when it has fewer than 3 positive controls in the\n"
      "source run or one of them FAILed any gate there (a FAIL that its YAML's expected_on condition\n"
      "predicts for this environment, a CPU or a LibTorch release, is left out instead, and named).\n"
      "A whole source run is refused when it was started with --replicates, holds an INCONCLUSIVE\n"
      "forward result or a control that missed its YAML expectation: its evidence is not what the\n"
      "cases declare. The source is the newest finished run of the profile (default: contract\n"
      "shapes) in the environment, or the runs given by --run.\n"
      "Prints old and new thresholds and the verdict every control of the source run would get\n"
      "under the new thresholds, from the stored U values and bias frontiers (no kernel runs).\n"
      "--apply stores the\n"
      "calibration; later `kcert nightly` runs in that environment use it and record its id.\n\n"
      "Examples:\n"
      "  kcert calibrate                      # dry run for this machine's environment\n"
      "  kcert calibrate --apply --by alice\n"
      "  kcert calibrate --history\n\n"
      "Exit status: 0 done (some families may be refused), 2 nothing to calibrate from or a\n"
      "database error.";

// The source runs: those named, else the newest finished run of the profile in `env`.
std::vector<std::string> source_runs(store::ResultStore& db, const std::string& env, const CalibrateOptions& o) {
  if (!o.runs.empty()) return o.runs;
  const auto latest = db.latest_finished_run(env, o.profile);
  if (!latest) {
    throw InputError(fmt::format("no finished run of profile '{}' in environment {}: run `kcert nightly{}` first",
                                 o.profile.empty() ? "contract shapes" : o.profile, env,
                                 o.profile.empty() ? "" : " --profile " + o.profile));
  }
  return {*latest};
}

// The forward controls of the source runs in `env`, each run checked as fit to calibrate from.
std::vector<eval::ControlOutcome> source_controls(store::ResultStore& db, const std::string& env,
                                                  const std::vector<std::string>& runs) {
  std::vector<eval::ControlOutcome> controls;
  for (const auto& run : runs) {
    const auto summary = db.run_summary(run);
    if (!summary) throw InputError("run " + run + " is not in the database");
    if (summary->status != "finished") throw InputError("run " + run + " is " + summary->status + ", not finished");
    const auto results = db.run_results(run);
    refuse_unfit_source(run, *summary, results);
    for (const auto& r : results) {
      if (r.fingerprint != env) continue;
      // Forward controls only: the calibration applies to forward cases (a gradient's U
      // is on another scale; backward calibration per direction is not built yet).
      auto o = eval::outcome_from_document(r.document);
      if (o.direction == "forward") controls.push_back(std::move(o));
    }
  }
  if (controls.empty()) throw InputError("the source run(s) hold no results in environment " + env);
  return controls;
}

// "; left out: ID, a FAIL expected on CONDITION, ..." after a refusal, " (left out: ...)" after
// "calibrated", or nothing.
std::string left_out_text(const eval::FamilyPlan& p, bool refused) {
  std::vector<std::string> parts;
  for (const auto& [id, condition] : p.left_out.items()) {
    parts.push_back(fmt::format("{}, a FAIL expected on {}", id, condition.get<std::string>()));
  }
  if (parts.empty()) return {};
  const auto list = fmt::format("{}", fmt::join(parts, "; "));
  return refused ? "; left out: " + list : " (left out: " + list + ")";
}

// Each family's plan: old and new thresholds and floors, or why it is refused.
void print_plans(const std::vector<eval::FamilyPlan>& plans) {
  std::cout << fmt::format("{:<18} {:>4} {:>9}  {:<22} {:<16} {:>15}  {:<13} {:<13} {}\n", "family", "pos", "max U",
                           "old warn/fail", "new warn/fail", "max ULP S/M", "old c S/M", "new c S/M", "status");
  for (const auto& p : plans) {
    const bool ok = p.refused.empty();
    std::cout << fmt::format("{:<18} {:>4} {:>9.4g}  {:<22} {:<16} {:>15}  {:<13} {:<13} {}\n", p.family, p.positives,
                             p.max_u, fmt::format("{:.4g}/{:.4g} ({})", p.old_warn, p.old_fail, p.old_label),
                             ok ? fmt::format("{:.4g}/{:.4g}", p.new_warn, p.new_fail) : std::string("-"),
                             fmt::format("{:.3g}/{:.3g}", p.max_ulp_signed, p.max_ulp_magnitude),
                             fmt::format("{:.3g}/{:.3g}", p.old_c, p.old_c_magnitude),
                             ok ? fmt::format("{:.3g}/{:.3g}", p.new_c, p.new_c_magnitude) : std::string("-"),
                             (ok ? std::string("calibrated") : "refused: " + p.refused) + left_out_text(p, !ok));
  }
}

// What every control would read under the new thresholds (refused families keep theirs).
void print_verdicts_after(const std::vector<eval::ControlOutcome>& controls, const std::vector<eval::ControlOutcome>& after) {
  std::cout << fmt::format("\n{:<40} {:<8} {:<18} {:>9}  {:<17} {:<17} {}\n", "control", "kind", "family", "U",
                           "bias old->new", "variance old->new", "overall old->new");
  for (std::size_t i = 0; i < controls.size(); ++i) {
    const auto& was = controls[i];
    const auto& c = after[i];
    std::cout << fmt::format("{:<40} {:<8} {:<18} {:>9}  {:<17} {:<17} {}{}\n", c.id, c.kind, c.family, u_text(c),
                             fmt::format("{} -> {}", stats::to_string(was.bias), stats::to_string(c.bias)),
                             fmt::format("{} -> {}", stats::to_string(was.variance), stats::to_string(c.variance)),
                             fmt::format("{} -> {}", stats::to_string(was.verdict), stats::to_string(c.verdict)),
                             (c.kind == "negative" && was.verdict != stats::Verdict::pass && c.verdict == stats::Verdict::pass)
                                 ? "  (would escape)"
                                 : (c.kind == "positive" && was.verdict != stats::Verdict::fail && c.verdict == stats::Verdict::fail)
                                       ? "  (would be a false alarm)"
                                       : "");
  }
  const auto before_t = eval::tabulate(controls), after_t = eval::tabulate(after);
  std::cout << fmt::format("\nnegatives detected {}/{} -> {}/{}; positives FAIL {}/{} -> {}/{}, WARN {}/{} -> {}/{}\n",
                           before_t.combined.detected, before_t.negatives, after_t.combined.detected, after_t.negatives,
                           before_t.combined.false_fail, before_t.positives, after_t.combined.false_fail,
                           after_t.positives, before_t.combined.false_warn, before_t.positives,
                           after_t.combined.false_warn, after_t.positives);
}

// Stores each calibrated family's plan (--apply).
void store_plans(store::ResultStore& db, const std::string& env, const std::vector<std::string>& runs,
                 const std::vector<eval::FamilyPlan>& plans, const eval::CalibrationRule& rule, const std::string& by) {
  for (const auto& p : plans) {
    if (!p.refused.empty()) continue;
    store::Calibration c;
    c.fingerprint = env;
    c.family = p.family;
    c.warn_k = p.new_warn;
    c.fail_k = p.new_fail;
    c.previous_warn_k = p.old_warn;
    c.previous_fail_k = p.old_fail;
    c.rule_version = rule.version;
    c.source_runs = runs;
    c.positives = p.positives;
    c.max_u = p.max_u;
    c.created_by = by;
    c.bias_c = p.new_c;
    c.bias_c_magnitude = p.new_c_magnitude;
    c.previous_bias_c = p.old_c;
    c.previous_bias_c_magnitude = p.old_c_magnitude;
    c.details = {{"u", p.used},           {"margin", rule.margin},           {"ratio", rule.ratio},
                 {"previous", p.old_label}, {"bias_ulp", p.used_bias},      {"bias_margin", rule.bias_margin},
                 {"bias_c_min", rule.bias_c_min}, {"left_out", p.left_out}};
    c.id = db.store_calibration(c);
    std::cout << fmt::format("stored {} for family {} (warn_K {:.4g}, fail_K {:.4g}; bias c {:.3g}, c_magnitude {:.3g})\n",
                             c.label(), p.family, c.warn_k, c.fail_k, *c.bias_c, *c.bias_c_magnitude);
  }
}

void calibrate(const CalibrateOptions& o) {
  store::ResultStore db(store::conninfo_from_environment());
  if (o.history) {
    print_history(db, o.environment);
    return;
  }
  const auto env = o.environment.empty() ? store::detect_environment().fingerprint : o.environment;
  const auto runs = source_runs(db, env, o);
  const auto controls = source_controls(db, env, runs);
  const eval::CalibrationRule rule;
  std::map<std::string, eval::CurrentThresholds> current;
  for (const auto& [family, c] : db.latest_calibrations(env)) {
    const stats::BiasThresholds shipped;
    current[family] = {c.warn_k, c.fail_k, c.label(), c.bias_c.value_or(shipped.c),
                       c.bias_c_magnitude.value_or(shipped.c_magnitude)};
  }
  const auto plans = eval::plan_calibration(controls, current, rule);
  std::cout << fmt::format("calibration {} for environment {} from run(s) {}\n\n", rule.version, env, fmt::join(runs, ", "));
  print_plans(plans);
  print_verdicts_after(controls, eval::apply_calibration(controls, plans));
  int calibrated = 0;
  for (const auto& p : plans) calibrated += p.refused.empty();
  if (calibrated == 0) throw InputError("no family could be calibrated (see the reasons above)");
  if (!o.apply) {
    std::cout << "dry run: nothing stored (add --apply to store the calibrated families)\n";
    return;
  }
  store_plans(db, env, runs, plans, rule, who(o.by));
}

}  // namespace

void register_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  auto* cmd = app.add_subcommand("calibrate",
                                 "Re-derive the variance thresholds and bias floors of each family from stored positive controls");
  cmd->footer(kCalibrateHelp);
  cmd->add_option("--env", o->environment, "environment fingerprint (default: this machine's)");
  cmd->add_option("--run", o->runs, "source run id (repeatable; default: the newest finished run)")->allow_extra_args(false);
  cmd->add_option("--profile", o->profile, "profile of the source run (default: contract shapes)");
  cmd->add_option("--by", o->by, "who applies it (default: $USER@host)");
  cmd->add_flag("--apply", o->apply, "store the calibration");
  cmd->add_flag("--history", o->history, "list stored calibrations (all environments unless --env)");
  cmd->callback([o]() { calibrate(*o); });
}

}  // namespace kcert::cli
