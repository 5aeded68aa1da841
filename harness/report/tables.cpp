#include "harness/report/tables.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "harness/text/escape.hpp"

namespace kcert::report {

namespace {

std::string num(double v, int digits = 4) {
  if (std::isnan(v)) return "-";
  if (std::isinf(v)) return v > 0 ? "+inf" : "-inf";
  return fmt::format("{:.{}g}", v, digits);
}

std::string verdict_text(const engine::CaseResult& r, stats::Verdict v) {
  return !r.error.empty() ? "ERROR" : !r.skipped.empty() ? "SKIP" : std::string(stats::to_string(v));
}

std::string direction(int d) { return d > 0 ? "+" : d < 0 ? "-" : "0"; }

// A probe setting's or gradient's algebra verdict, "n/a" where the gate did not run.
std::string point_algebra(const engine::SweepPoint& p) {
  return p.algebra_applicable ? std::string(stats::to_string(p.algebra)) : std::string("n/a");
}

// The algebra cell: "n/a" where the gate could not run (an opaque production, exact=False).
std::string algebra_cell(const engine::CaseResult& r) {
  return r.ran() && !r.algebra.applicable ? std::string("n/a") : verdict_text(r, r.algebra.verdict);
}

void print_buckets(std::ostream& out, const gates::BiasStatisticResult& s, const std::string& axis) {
  const auto& rows = s.flagged.empty() ? s.top : s.flagged;
  if (rows.empty()) return;
  // The two sides against the oracle (attribution), as signed ULP effects: "ref-q" and "prod-q".
  const bool sides = rows.front().has_sides;
  out << fmt::format("            {:>8}  {:>3}  {:>9}  {:>8}  {:>9}  {:>11}  {}{}\n", axis, "dir", "z", "effect", "ULP eff.",
                     "mean (abs)", sides ? fmt::format("{:>9}  {:>9}  ", "ref-q ULP", "prod-q ULP") : std::string(),
                     "verdict");
  const auto signed_ulp = [](const gates::BucketReport::SideBias& e) {
    return (e.mean < 0 ? "-" : "+") + num(e.ulp_effect, 3);
  };
  const std::size_t shown = std::min<std::size_t>(rows.size(), 8);
  for (std::size_t i = 0; i < shown; ++i) {
    const auto& b = rows[i];
    out << fmt::format("            {:>8}  {:>3}  {:>9}  {:>8}  {:>9}  {:>11}  {}{}{}\n", b.bucket, direction(b.direction),
                       num(b.z), num(b.effect, 3), num(b.ulp_effect, 3), num(b.mean, 3),
                       b.has_sides ? fmt::format("{:>9}  {:>10}  ", signed_ulp(b.ref_error), signed_ulp(b.prod_error))
                                   : std::string(),
                       stats::to_string(b.verdict), b.attributed ? " (attributed to the reference)" : "");
  }
  // What --json really holds: the flagged list keeps at most 64 buckets (gates/results.hpp),
  // so a gate with more says how many it flagged in all.
  const auto total = static_cast<std::size_t>(std::max<std::int64_t>(0, s.fail_buckets + s.warn_buckets));
  const bool cut = !s.flagged.empty() && total > rows.size();
  if (rows.size() > shown) {
    out << fmt::format("            ... {} more flagged bucket(s) in --json{}\n", rows.size() - shown,
                       cut ? fmt::format(" ({} flagged in all; the JSON keeps the {} with the largest |z|)", total, rows.size())
                           : std::string());
  }
}

}  // namespace

void print_verdict_table(std::ostream& out, const std::vector<engine::CaseResult>& results) {
  std::size_t width = 4;
  for (const auto& r : results) width = std::max(width, r.testcase.id.size());
  width = std::min<std::size_t>(width, 60);
  // A variance PASS short of the horizon says so in its cell (issue 32), and a column is as
  // wide as its longest verdict (INCONCLUSIVE, PASS (short)), so the usual table keeps its layout.
  const auto variance_cell = [](const engine::CaseResult& r) {
    const bool short_of_horizon = r.ran() && !r.nonfinite && r.variance.verdict == stats::Verdict::pass &&
                                  !r.variance.evidence.reaches_horizon;
    return verdict_text(r, r.variance.verdict) + (short_of_horizon ? " (short)" : "");
  };
  std::size_t wa = 7, wb = 7, wv = 8, wo = 7;
  bool any_short = false;
  for (const auto& r : results) {
    wa = std::max(wa, algebra_cell(r).size());
    wb = std::max(wb, verdict_text(r, r.bias.verdict).size());
    wv = std::max(wv, variance_cell(r).size());
    wo = std::max(wo, verdict_text(r, r.verdict).size());
    any_short |= variance_cell(r).size() > verdict_text(r, r.variance.verdict).size();
  }
  out << fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>10}  {:>9}\n", "case", width, "algebra", wa, "bias", wb,
                     "variance", wv, "overall", wo, "replicates", "seconds");
  for (const auto& r : results) {
    out << fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>10}  {:>9.1f}{}\n", r.testcase.id.substr(0, width), width,
                       algebra_cell(r), wa, verdict_text(r, r.bias.verdict), wb, variance_cell(r), wv,
                       verdict_text(r, r.verdict), wo, r.replicates, r.runtime.seconds,
                       r.unexpected.empty() ? "" : "  (unexpected)");
  }
  if (any_short) out << "(short): a variance PASS whose evidence supports fewer replicates than the horizon T (see its evidence line)\n";
}

void print_case_details(std::ostream& out, const engine::CaseResult& r) {
  const auto& tc = r.testcase;
  out << fmt::format("\n== {} ({}, {}: {} -> {})\n", tc.id, contract::to_string(tc.kind), tc.family,
                     tc.reference.variant, tc.production.variant);
  if (!r.error.empty()) {
    out << "  error     " << r.error << "\n";
    return;
  }
  if (!r.skipped.empty()) {
    out << "  skipped   " << r.skipped << "\n";
    return;
  }
  if (!r.sweep.empty()) {
    // "sweep     4 probe settings; bias decided by negatives": then one line per setting.
    const auto by = [&](const char* gate) {
      const auto it = r.decided_by.find(gate);
      return it == r.decided_by.end() ? std::string("-") : it->second;
    };
    out << fmt::format("  sweep     {} probe settings, the worst decides: algebra by {}, bias by {}, variance by {}\n",
                       r.sweep.size(), by("algebra"), by("bias"), by("variance"));
    for (const auto& p : r.sweep) {
      out << fmt::format("    {:<16} {:<7} algebra {:<4}  bias {:<4} (max |z| {}, {} ULP)  variance {:<4} (U {})  {}\n", p.name,
                         stats::to_string(p.verdict), point_algebra(p), stats::to_string(p.bias),
                         num(p.max_abs_z), num(p.max_ulp_effect, 3), stats::to_string(p.variance), num(p.U),
                         p.probe_text.empty() ? std::string("(the contract's probe)") : p.probe_text);
    }
  }
  if (tc.direction == contract::Direction::backward) {
    // "backward  dy shifted N(0.5, 1²); 2 gradients, the worst decides: ...": then one line per gradient.
    const auto by = [&](const char* gate) {
      const auto it = r.gradient_decided_by.find(gate);
      return it == r.gradient_decided_by.end() ? std::string("-") : it->second;
    };
    const auto& bw = tc.backward;
    std::string extra;
    if (contract::dy_law_info(bw.dy_law).has_margin) extra += ", margin " + num(bw.dy_margin);
    if (bw.dy_zero_rows > 0) extra += fmt::format(", {} zero rows", bw.dy_zero_rows);
    if (bw.dy_huge_row != 1.0) extra += ", last row x" + num(bw.dy_huge_row);
    out << fmt::format("  backward  dy {} (shift {}, scale {}{}); {} gradient(s), the worst decides: algebra by {}, bias by {}, "
                       "variance by {}\n",
                       contract::to_string(bw.dy_law), num(bw.dy_shift), num(bw.dy_scale), extra, r.gradients.size(), by("algebra"), by("bias"),
                       by("variance"));
    for (const auto& g : r.gradients) {
      out << fmt::format("    {:<6} {:<5} algebra {:<4}  bias {:<4} ({} buckets, max |z| {}, {} ULP)  variance {:<4} (U {})  {}\n",
                         g.name, stats::to_string(g.verdict), point_algebra(g), stats::to_string(g.bias),
                         g.bucket_axis, num(g.max_abs_z), num(g.max_ulp_effect, 3), stats::to_string(g.variance), num(g.U),
                         g.reduction_size > 0 ? fmt::format("N = {} {} per replicate", g.reduction_size, g.reduces)
                                              : std::string("per element"));
    }
    out << "  (the gate lines below are the deciding gradients')\n";
  }
  out << fmt::format("  algebra   {}  {}\n", r.algebra.applicable ? std::string(stats::to_string(r.algebra.verdict)) : "n/a",
                     r.algebra.reason);
  const auto& b = r.bias;
  out << fmt::format("  bias      {}  {}\n", stats::to_string(b.verdict), b.reason);
  if (!r.nonfinite) {
    for (const auto* s : {&b.signed_statistic, &b.magnitude_statistic}) {
      out << fmt::format("    {} statistic{}: {} ({} FAIL, {} WARN{}, max |z| {}, max ULP effect {})\n",
                         stats::to_string(s->statistic), s->deciding ? "" : " [diagnostic]",
                         stats::to_string(s->verdict), s->fail_buckets, s->warn_buckets,
                         s->attributed_buckets > 0 ? fmt::format(" of which {} attributed to the reference", s->attributed_buckets)
                                                   : std::string(),
                         num(s->max_abs_z), num(s->max_ulp_effect, 3));
      print_buckets(out, *s, b.axis);
    }
    const int deciding = int{b.signed_statistic.deciding} + int{b.magnitude_statistic.deciding};
    out << fmt::format("    z* {} (|z| cut {}: Student t, {} df), s_min {}, c {} ULP (magnitude {}); union bound 2G·Phi(-z*) = {} "
                       "over {} buckets x {} deciding statistic(s); rho_min {} -> T_cert {} steps at R = {} replicates\n",
                       num(b.thresholds.z_star), num(b.z_cut), b.replicates - 1, num(b.thresholds.s_min), num(b.thresholds.c),
                       num(b.thresholds.c_magnitude), num(b.union_bound, 3), b.buckets, deciding, num(b.horizon.rho_min, 3),
                       num(b.horizon.t_cert, 3), b.replicates);
  }
  const auto& v = r.variance;
  out << fmt::format("  variance  {}  {}\n", stats::to_string(v.verdict), v.reason);
  if (!r.nonfinite) {
    const auto& t = v.tail;
    out << fmt::format("    K-hat: q50 {} q90 {} q99 {} max {}; zeros {:.1f} %\n", num(t.khat.q50), num(t.khat.q90),
                       num(t.khat.q99), num(t.khat.max), 100.0 * t.khat.zero_fraction);
    if (t.mode == stats::TailMode::fitted) {
      out << fmt::format("    u {}, n_exc {}, zeta {}, xi {} (clipped {}), sigma {}, r_T {} in [{}, {}] (one-sided {} each), se {}\n",
                         num(t.u), t.n_exc, num(t.zeta, 3), num(t.free_fit->xi, 3), num(t.clipped_fit->xi, 3),
                         num(t.clipped_fit->sigma, 3), num(t.r_t), num(t.lower), num(t.U), num(t.settings.level),
                         num(t.se, 3));
      const auto& h = t.heavy;
      out << fmt::format("    bounded-tail check: free xi {}, LR {} against {} (one-sided, level {}): {}\n", num(h.xi_free, 3),
                         num(h.lr, 3), num(h.cut, 3), num(t.settings.heavy_tail_level),
                         !h.rejected ? (h.atom ? fmt::format("holds, but the bound reads past a maximum that is an atom ({} replicates at it, "
                                                             "a cap reached): max K-hat decides",
                                                             h.tied_at_maximum)
                                        : h.model_matters && h.U_unclipped
                                            ? fmt::format("not rejected, but not shown: U over xi up to {} is {}, the verdict rests on xi <= 0",
                                                          num(t.settings.heavy_tail_xi_max), num(*h.U_unclipped))
                                            : std::string("holds"))
                         : h.bounded_q ? fmt::format("rejected at q{}, bounded above q{} (xi {}, LR {}): fitted there",
                                                     num(t.settings.tail_q), num(*h.bounded_q), num(h.bounded_xi, 3), num(h.bounded_lr, 3))
                         : h.endpoint ? fmt::format("rejected at q{}, but the largest {} exceedances close on an endpoint (spacing ratio {} < {}): "
                                                    "{} decides",
                                                    num(t.settings.tail_q), h.endpoint->top + 1, num(h.endpoint->ratio, 3),
                                                    num(h.endpoint->cut, 3), t.maximum_decides() ? "max K-hat" : "the bound over xi <= 0")
                                       : fmt::format("REJECTED, heavy tail: U over xi up to {} is {}", num(t.settings.heavy_tail_xi_max),
                                                     num(*h.U_unclipped)));  // set: an unresolved rejection has xi-hat > 0
    }
    const auto& e = v.evidence;
    out << fmt::format("    evidence (the stopped sample): {} replicates, {} with K-hat > 0, {} exceedances; supports a horizon of {} replicates{}; "
                       "an event rarer than 3/R per replicate is excluded only up to R/3 = {}\n",
                       e.replicates, e.events, e.exceedances, num(e.horizon, 3),
                       e.reaches_horizon ? "" : fmt::format(" (SHORT of T = {})", num(t.settings.horizon, 3)),
                       num(e.unseen_event_horizon, 3));
    std::string looks;
    for (auto l : v.looks) looks += (looks.empty() ? "" : ", ") + std::to_string(l);
    out << fmt::format("    stop: {} after looks at R = {}{}\n", stats::to_string(v.stop), looks,
                       v.unstable ? " (UNSTABLE: R_max reached)" : "");
  }
  std::string shape;
  for (const auto& [k, val] : tc.probe.params.values()) {
    if (k.rfind("shape.", 0) == 0) shape += (shape.empty() ? "" : " ") + k.substr(6) + "=" + kernels::format_value(val);
  }
  out << fmt::format("  provenance seed {}, dtype {}, shape {}, shift {}, device {}, LibTorch {}{}\n", tc.probe.seed,
                     stats::traits(tc.probe.dtype).name, shape, num(tc.probe.shift), r.runtime.device, r.torch_version,
                     tc.profile.empty() ? "" : ", profile " + tc.profile);
  for (const auto& u : r.unexpected) out << "  UNEXPECTED " << u << "\n";
}

namespace {
std::string v(stats::Verdict x) { return std::string(stats::to_string(x)); }
std::string flag(bool f) { return f ? "flag" : "-"; }
}  // namespace

void print_controls(std::ostream& out, const std::vector<eval::ControlOutcome>& results) {
  // Columns as wide as their entries (a fixed 9 let `residual_rmsnorm` push the row apart).
  std::size_t w = 7, fw = 6;
  for (const auto& r : results) {
    w = std::max(w, r.id.size());
    fw = std::max(fw, r.family.size());
  }
  w = std::min<std::size_t>(w, 48);
  out << fmt::format("{:<{}}  {:<8} {:<{}} {:<7} {:<7} {:<8} {:<7} {:<8} {:<6} {:<6} {:<6} {}\n", "control", w, "kind",
                     "family", fw, "algebra", "bias", "variance", "all", "bias(S)", "close", "FA", "dynamo", "expected");
  // A variance PASS short of the horizon is "PASS*" (issue 32): marked where the verdict is
  // read, in the column's width, with the footnote below the table.
  // The outcomes may come from stored documents (nightly --finish): their texts reach the
  // terminal through terminal_safe.
  const auto t = [](const std::string& s) { return text::terminal_safe(s); };
  bool any_short = false;
  for (const auto& r : results) {
    if (!r.error.empty()) {
      out << fmt::format("{:<{}}  {:<8} {:<{}} ERROR: {}\n", t(r.id.substr(0, w)), w, t(r.kind), t(r.family), fw, t(r.error));
      continue;
    }
    if (!r.skipped.empty()) {
      out << fmt::format("{:<{}}  {:<8} {:<{}} SKIP: {}\n", t(r.id.substr(0, w)), w, t(r.kind), t(r.family), fw, t(r.skipped));
      continue;
    }
    out << fmt::format("{:<{}}  {:<8} {:<{}} {:<7} {:<7} {:<8} {:<7} {:<8} {:<6} {:<6} {:<6} {}\n", t(r.id.substr(0, w)), w,
                       t(r.kind), t(r.family), fw, r.algebra_applicable ? v(r.algebra) : std::string("n/a"), v(r.bias),
                       v(r.variance) + (r.short_evidence ? "*" : ""), v(r.verdict),
                       v(r.bias_signed_only), flag(r.assert_close), flag(r.flash_attention), flag(r.dynamo_fp64),
                       r.unexpected.empty() ? "ok" : "UNEXPECTED");
    any_short |= r.short_evidence;
  }
  if (any_short) out << "PASS*: a variance PASS whose evidence supports fewer replicates than the horizon T\n";
}

std::string condition_in_words(const std::string& condition) {
  if (condition == "cpu_bf16_gemm_in_bf16") return "for a CPU whose bf16 GEMM accumulates in bf16 (cpu_bf16_gemm_in_bf16)";
  if (condition.rfind("libtorch>=", 0) == 0) return "for LibTorch " + condition.substr(10) + " and later (" + condition + ")";
  if (condition.rfind("libtorch", 0) == 0) return "for LibTorch " + condition.substr(8) + ".x (" + condition + ")";
  return "under " + condition;
}

std::string tally_line(const eval::Falsifiability& f, double seconds) {
  const auto& c = f.combined;
  const int controls = f.negatives + f.positives + f.errors + static_cast<int>(f.skipped.size());
  const int positives_ok = f.positives - c.false_fail - c.positives_inconclusive;
  std::string line = fmt::format("{} controls: {} of {} negatives detected, {} of {} positives not FAILed", controls,
                                 c.detected, f.negatives, positives_ok, f.positives);
  if (c.false_warn > 0) line += fmt::format(" ({} WARN)", c.false_warn);
  line += fmt::format(", {} inconclusive, {} skipped, {} error(s); {} unexpected against the YAML expectations",
                      c.negatives_inconclusive + c.positives_inconclusive, f.skipped.size(), f.errors, f.unexpected.size());
  if (seconds >= 0) line += ", in " + duration_text(seconds);
  return line;
}

std::string duration_text(double seconds) {
  return seconds < 120 ? fmt::format("{:.0f} s", seconds) : fmt::format("{:.0f} min", seconds / 60);
}

void print_falsifiability(std::ostream& out, const eval::Falsifiability& f) {
  const auto row = [&](const std::string& name, const eval::Tally& t, bool warn) {
    out << fmt::format("  {:<34} {:>3}/{:<3}       {:>3}/{:<3}       {}\n", name, t.detected, f.negatives, t.false_fail,
                       f.positives, warn ? fmt::format("{:>3}/{:<3}", t.false_warn, f.positives) : std::string("  -"));
  };
  out << fmt::format("\nfalsifiability ({} negative, {} positive controls{}{})\n", f.negatives, f.positives,
                     f.skipped.empty() ? "" : fmt::format(", {} skipped", f.skipped.size()),
                     f.torch_version.empty() ? "" : ", LibTorch " + f.torch_version);
  out << fmt::format("  {:<34} {:<15} {:<15} {}\n", "", "negatives", "positives", "positives");
  out << fmt::format("  {:<34} {:<15} {:<15} {}\n", "", "detected", "FAIL", "WARN");
  row("algebra gate", f.algebra, true);
  row("bias gate (deciding statistics)", f.bias, true);
  row("variance gate", f.variance, true);
  row("combined", f.combined, true);
  row("bias gate, signed alone (notes)", f.bias_signed_only, true);
  row("combined, signed alone (notes)", f.combined_signed_only, true);
  // Per direction (issue 31) once a suite holds backward controls: the forward table's
  // comparison with the notes is only meaningful on the forward ones.
  // A row counted against its own controls, not the table's.
  const auto own_row = [&](const std::string& name, const eval::Falsifiability::DirectionTally& t) {
    out << fmt::format("  {:<34} {:>3}/{:<3}       {:>3}/{:<3}       {:>3}/{:<3}\n", name, t.combined.detected, t.negatives,
                       t.combined.false_fail, t.positives, t.combined.false_warn, t.positives);
  };
  if (f.by_direction.size() > 1 || f.by_direction.count("backward")) {
    for (const auto& [d, t] : f.by_direction) own_row("combined, " + d + " controls", t);
  }
  if (f.both_directions) own_row("combined, cases in both directions", *f.both_directions);
  // Its own line (issue 32): an INCONCLUSIVE negative is neither a detection nor an escape.
  out << fmt::format("  {:<34} {:>3}/{:<3} negatives, {:>3}/{:<3} positives (the run could not see an effect at a gate's floor)\n",
                     "combined INCONCLUSIVE", f.combined.negatives_inconclusive, f.negatives,
                     f.combined.positives_inconclusive, f.positives);
  out << "  notes' reference (30 + 35 controls): 29/30 detected, 0/35 FAIL, 2/35 WARN\n";
  out << "  checks in use today (flagged on the first replicate):\n";
  row("  assert_close (bf16 rtol 1.6e-2)", f.assert_close, false);
  row("  FlashAttention 2x + 1 ULP rule", f.flash_attention, false);
  row("  dynamo fp64 RMSE 3x rule", f.dynamo_fp64, false);
  out << fmt::format("  variance PASS short of the horizon (thin-tail bound above warn at T, read from the maximum, or no events: ~R/3): {}/{} negatives, {}/{} positives\n",
                     f.short_evidence_negatives, f.negatives, f.short_evidence_positives, f.positives);
  if (f.algebra_not_applicable_negatives + f.algebra_not_applicable_positives > 0) {
    out << fmt::format("  algebra gate not applicable (opaque production, exact=False; counted as no detection): {}/{} negatives, {}/{} positives\n",
                       f.algebra_not_applicable_negatives, f.negatives, f.algebra_not_applicable_positives, f.positives);
  }
  // Only stored results from before the looks spent α (issue 36) carry a confirmation set.
  if (f.confirmed > 0) {
    out << fmt::format("  variance verdicts confirmed on a fresh replicate set after repeated looks (stored results): {} ({} disagreed, the stricter stood)\n",
                       f.confirmed, f.confirmation_disagreed);
  }
  if (f.positives_equivalent + f.positives_not_shown_equivalent > 0) {
    // What a positive's bias PASS rests on (issue 32): shown equivalent within ±c, or only not detected.
    std::string families;
    for (const auto& [name, c] : f.equivalence_by_family) families += fmt::format("{}{} {}/{}", families.empty() ? "" : ", ", name, c.first, c.first + c.second);
    out << fmt::format("  bias PASS of positives: {} equivalent within ±c ULP, {} not shown equivalent (by family, equivalent/PASS: {})\n",
                       f.positives_equivalent, f.positives_not_shown_equivalent, families);
  }
  out << fmt::format("expectations met: {}/{}\n", f.expectations_met, f.negatives + f.positives + f.errors);
  for (const auto& u : f.unexpected) out << "  UNEXPECTED " << u << "\n";
  for (const auto& [id, condition] : f.conditioned) out << "  JUDGED " << id << " by its expectation " << condition_in_words(condition) << "\n";
  // Not counted above, neither as passed nor as met: the build cannot run them.
  for (const auto& [id, why] : f.skipped) out << "  SKIPPED " << id << ": " << why << "\n";
}


void markdown_controls(std::ostream& out, const std::vector<eval::ControlOutcome>& results) {
  out << "| control | kind | family | algebra | bias | variance | all | bias(S) | U | assert_close | FA | dynamo | expected |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  bool any_short = false;
  // Texts from results (a load error's file path is its id, an error is a plugin's or the
  // server's words) are cells: a `|` or a newline in one broke the table, and raw HTML in a
  // summary.md is live where Markdown is rendered.
  const auto& cell = text::markdown_cell;
  for (const auto& r : results) {
    if (!r.error.empty()) {
      out << fmt::format("| {} | {} | {} | ERROR: {} |||||||||\n", cell(r.id), cell(r.kind), cell(r.family), cell(r.error));
      continue;
    }
    if (!r.skipped.empty()) {
      out << fmt::format("| {} | {} | {} | SKIP: {} |||||||||\n", cell(r.id), cell(r.kind), cell(r.family), cell(r.skipped));
      continue;
    }
    out << fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", cell(r.id), cell(r.kind), cell(r.family),
                       r.algebra_applicable ? v(r.algebra) : std::string("n/a"), v(r.bias),
                       v(r.variance) + (r.short_evidence ? "\\*" : ""), v(r.verdict), v(r.bias_signed_only),
                       r.variance_u ? fmt::format("{:.3g}", *r.variance_u) : std::string("inf/-"), flag(r.assert_close),
                       flag(r.flash_attention), flag(r.dynamo_fp64),
                       r.unexpected.empty() ? std::string("ok") : "UNEXPECTED: " + cell(r.unexpected.front()));
    any_short |= r.short_evidence;
  }
  if (any_short) out << "\nPASS\\*: a variance PASS whose evidence supports fewer replicates than the horizon T.\n";
}

void markdown_falsifiability(std::ostream& out, const eval::Falsifiability& f) {
  const auto row = [&](const std::string& name, const eval::Tally& t, bool warn) {
    out << fmt::format("| {} | {}/{} | {}/{} | {} |\n", name, t.detected, f.negatives, t.false_fail, f.positives,
                       warn ? fmt::format("{}/{}", t.false_warn, f.positives) : std::string("-"));
  };
  if (!f.torch_version.empty()) out << "On LibTorch " << text::markdown_cell(f.torch_version) << ".\n\n";
  out << "| | negatives detected | positives FAIL | positives WARN |\n|---|---|---|---|\n";
  row("algebra gate", f.algebra, true);
  row("bias gate (deciding statistics)", f.bias, true);
  row("variance gate", f.variance, true);
  row("**combined**", f.combined, true);
  row("bias gate, signed alone (notes)", f.bias_signed_only, true);
  row("combined, signed alone (notes)", f.combined_signed_only, true);
  // Per direction (issue 31), each against its own counts.
  const auto own_row = [&](const std::string& name, const eval::Falsifiability::DirectionTally& t) {
    out << fmt::format("| {} | {}/{} | {}/{} | {}/{} |\n", name, t.combined.detected, t.negatives, t.combined.false_fail,
                       t.positives, t.combined.false_warn, t.positives);
  };
  if (f.by_direction.size() > 1 || f.by_direction.count("backward")) {
    for (const auto& [d, t] : f.by_direction) own_row("combined, " + d + " controls", t);
  }
  if (f.both_directions) own_row("combined, cases in both directions", *f.both_directions);
  row("assert_close (first replicate)", f.assert_close, false);
  row("FlashAttention 2x + 1 ULP rule", f.flash_attention, false);
  row("dynamo fp64 RMSE 3x rule", f.dynamo_fp64, false);
  out << fmt::format("\nINCONCLUSIVE (the run could not see an effect at a gate's floor; neither detected nor escaped): "
                     "{}/{} negatives, {}/{} positives.\n",
                     f.combined.negatives_inconclusive, f.negatives, f.combined.positives_inconclusive, f.positives);
  out << "\nNotes' reference (30 + 35 controls): 29/30 detected, 0/35 FAIL, 2/35 WARN. Expectations met: "
      << f.expectations_met << "/" << (f.negatives + f.positives + f.errors) << ".\n";
  out << fmt::format("Variance PASS short of the horizon (thin-tail bound above warn at T, read from the maximum, or no events): {}/{} negatives, {}/{} positives.{}\n",
                     f.short_evidence_negatives, f.negatives, f.short_evidence_positives, f.positives,
                     f.confirmed > 0 ? fmt::format(" Variance verdicts confirmed on a fresh replicate set (stored results): {} ({} disagreed).",
                                                   f.confirmed, f.confirmation_disagreed)
                                     : std::string());
  if (f.positives_equivalent + f.positives_not_shown_equivalent > 0) {
    out << fmt::format("\nBias PASS of positives: {} shown equivalent within ±c ULP (TOST), {} not shown equivalent.\n\n"
                       "| family | equivalent | not shown equivalent |\n|---|---|---|\n",
                       f.positives_equivalent, f.positives_not_shown_equivalent);
    for (const auto& [name, c] : f.equivalence_by_family) out << fmt::format("| {} | {} | {} |\n", text::markdown_cell(name), c.first, c.second);
  }
  for (const auto& [id, condition] : f.conditioned) out << "\nJudged by its expectation " << text::markdown_cell(condition_in_words(condition)) << ": `" << text::markdown_cell(id) << "`.\n";
  for (const auto& [id, why] : f.skipped) out << "\nSkipped (not counted): `" << text::markdown_cell(id) << "`: " << text::markdown_cell(why) << "\n";
}

}  // namespace kcert::report
