#include "harness/gates/bias_gate.hpp"

#include "harness/stats/format.hpp"

#include <algorithm>
#include <optional>
#include <cmath>
#include <stdexcept>


namespace kcert::gates {

BiasAccumulator::BiasAccumulator(std::size_t buckets)
    : signed_(buckets), magnitude_(buckets), signed_values_(buckets), magnitude_values_(buckets), signed_sides_(buckets),
      magnitude_sides_(buckets), scale_sum_(buckets, 0.0) {}

void BiasAccumulator::SideMoments::add(std::span<const double> ref_row, std::span<const double> prod_row) {
  if (ref_row.size() != prod_row.size()) throw std::invalid_argument("BiasAccumulator::add: side error rows differ in size");
  std::vector<double> s(ref_row.size()), d(ref_row.size());
  for (std::size_t g = 0; g < ref_row.size(); ++g) {
    s[g] = ref_row[g] + prod_row[g];
    d[g] = ref_row[g] - prod_row[g];
  }
  ref.add_row(ref_row);
  prod.add_row(prod_row);
  sum.add_row(s);
  gap.add_row(d);
}

void BiasAccumulator::add(std::span<const double> delta, std::span<const double> magnitude,
                          std::span<const double> abs_oracle_mean, double peak, const SideErrors* errors) {
  peak_sum_ += peak;
  signed_.add_row(delta);
  magnitude_.add_row(magnitude);
  signed_values_.add_row(delta);
  magnitude_values_.add_row(magnitude);
  if (abs_oracle_mean.size() != scale_sum_.size()) throw std::invalid_argument("BiasAccumulator::add: scale row has the wrong size");
  for (std::size_t g = 0; g < scale_sum_.size(); ++g) scale_sum_[g] += abs_oracle_mean[g];
  if (errors == nullptr || errors->ref.empty()) {
    attributable_ = false;
  } else if (attributable_) {
    signed_sides_.add(errors->ref, errors->prod);
    magnitude_sides_.add(errors->ref_magnitude, errors->prod_magnitude);
  }
}

namespace {

stats::BucketSample sample_of(const stats::RunningMoments& m, double ulp) { return {m.count(), m.mean(), m.sd(), ulp}; }

BucketReport::SideBias side_of(const stats::BucketDecision& d, double mean) {
  return {mean, d.z, d.ulp_effect, d.verdict};
}

BiasStatisticResult judge(const stats::BucketMoments& m, const stats::BucketValues& values,
                          const BiasAccumulator::SideMoments* sides,
                          const std::vector<double>& scale, const std::vector<double>& ulp,
                          stats::BiasStatistic which, const stats::BiasThresholds& t, double cut) {
  BiasStatisticResult out;
  out.statistic = which;
  std::vector<BucketReport> all;
  all.reserve(m.buckets());
  double hardest = -1.0, hardest_mean = 0.0, hardest_sd = 0.0;
  // The lattice bucket whose interval reaches furthest: its own R needed (the t figure of the
  // hardest bucket says nothing of an interval for few values, issue 52).
  std::optional<stats::BucketSample> widest_lattice;
  double widest_lattice_ulp = -1.0;
  std::vector<double> half_widths;
  half_widths.reserve(m.buckets());
  for (std::size_t g = 0; g < m.buckets(); ++g) {
    const auto& mg = m[g];
    const stats::BucketSample bs{mg.count(), mg.mean(), mg.sd(), ulp[g], values[g].support()};
    const auto d = stats::decide_bucket(bs, t, cut);
    BucketReport b;
    b.bucket = static_cast<std::int64_t>(g);
    b.direction = d.direction;
    b.z = d.z;
    b.effect = d.effect;
    b.ulp_effect = d.ulp_effect;
    b.mean = mg.mean();
    b.sd = mg.sd();
    b.scale = scale[g];
    b.ulp = ulp[g];
    b.verdict = d.verdict;
    if (sides != nullptr) {
      const stats::AttributionSample a{sample_of(sides->ref[g], ulp[g]), sample_of(sides->prod[g], ulp[g]),
                                       sample_of(sides->sum[g], ulp[g]), sample_of(sides->gap[g], ulp[g])};
      const auto at = stats::attribute_bucket(d, a, t, cut);
      b.has_sides = true;
      b.ref_error = side_of(at.ref, sides->ref[g].mean());
      b.prod_error = side_of(at.prod, sides->prod[g].mean());
      if (d.verdict == Verdict::fail && at.production_closer) {
        b.verdict = Verdict::warn;
        b.attributed = true;
        ++out.attributed_buckets;
      }
    }
    // Equivalence within ±c: the bucket's (1 - 2a) interval, and the R its mean and sd would need.
    const auto eq = stats::equivalence_bucket(bs, t.c, cut, t.z_star);
    out.equivalent_buckets += eq.equivalent;
    out.lattice_buckets += eq.lattice;
    if (eq.lattice && !eq.equivalent && eq.widest_ulp > widest_lattice_ulp) {
      widest_lattice_ulp = eq.widest_ulp;
      widest_lattice = bs;
    }
    half_widths.push_back(eq.half_width_ulp);
    if (eq.widest_ulp > out.widest_ulp || out.widest_bucket < 0) {
      out.widest_ulp = eq.widest_ulp;
      out.widest_bucket = static_cast<std::int64_t>(g);
    }
    // The hardest bucket to show equivalent: the largest sd / (c - |mean|), in ULP.
    const double room = t.c - std::fabs(mg.mean()) / ulp[g];
    const double hardness = room <= 0.0 ? INFINITY : mg.sd() / ulp[g] / room;
    if (hardness > hardest) {
      hardest = hardness;
      hardest_mean = std::fabs(mg.mean()) / ulp[g];
      hardest_sd = mg.sd() / ulp[g];
    }
    out.verdict = stats::worst(out.verdict, b.verdict);
    out.fail_buckets += b.verdict == Verdict::fail;
    out.warn_buckets += b.verdict == Verdict::warn;
    out.max_abs_z = std::max(out.max_abs_z, std::fabs(d.z));
    out.max_ulp_effect = std::max(out.max_ulp_effect, d.ulp_effect);
    all.push_back(b);
  }
  // Largest |z| first; ties by bucket index so the order is reproducible.
  std::stable_sort(all.begin(), all.end(), [](const BucketReport& a, const BucketReport& b) {
    return std::fabs(a.z) > std::fabs(b.z);
  });
  // The flagged list is capped; the FAIL buckets go in first so the buckets that decide the
  // verdict are never the ones cut off by many larger-|z| WARNs (attributed ones, say).
  for (const auto want : {Verdict::fail, Verdict::warn}) {
    for (const auto& b : all) {
      if (b.verdict == want && out.flagged.size() < 64) out.flagged.push_back(b);
    }
  }
  out.equivalence_bound_ulp = t.c;
  out.equivalent = out.equivalent_buckets == static_cast<std::int64_t>(m.buckets());
  if (!out.equivalent && hardest >= 0.0) {
    out.replicates_needed = stats::replicates_for_equivalence(hardest_mean, hardest_sd, t.c, t.z_star);
    if (widest_lattice) {
      const auto lattice_need = stats::replicates_for_lattice_equivalence(*widest_lattice, t.c, t.z_star);
      // 0 means no R would show it: that dominates any finite figure.
      out.replicates_needed = lattice_need == 0 || out.replicates_needed == 0 ? 0 : std::max(out.replicates_needed, lattice_need);
    }
  }
  // The typical bucket (median half-width; the upper median for an even count): blind at the
  // floor when its interval is at least ±c wide (stats::BucketEquivalence::blind).
  if (!half_widths.empty()) {
    const auto mid = half_widths.begin() + static_cast<std::ptrdiff_t>(half_widths.size() / 2);
    std::nth_element(half_widths.begin(), mid, half_widths.end());
    out.typical_half_width_ulp = *mid;
    out.blind_at_floor = out.typical_half_width_ulp >= t.c;
    const double n = static_cast<double>(m[0].count());
    const double typical_sd = out.typical_half_width_ulp * std::sqrt(n) / cut;
    if (out.blind_at_floor) out.replicates_to_see_floor = stats::replicates_for_equivalence(0.0, typical_sd, t.c, t.z_star);
  }
  out.top.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(5, all.size())));
  std::vector<std::pair<double, double>> sig;
  for (const auto& b : all) {
    if (std::fabs(b.z) > cut && !b.attributed) sig.emplace_back(b.effect, b.ulp_effect);
  }
  std::sort(sig.begin(), sig.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second > b.second;
  });
  double best_ulp = -1.0;
  for (const auto& pt : sig) {
    if (pt.second > best_ulp) {
      out.frontier.push_back(pt);
      best_ulp = pt.second;
    }
  }
  return out;
}

}  // namespace

std::string equivalence_words(const BiasResult& r) {
  if (r.equivalent) {
    std::string bounds;
    for (const auto* s : {&r.signed_statistic, &r.magnitude_statistic}) {
      if (!s->deciding) continue;
      bounds += (bounds.empty() ? "" : ", ") + std::string(stats::to_string(s->statistic)) + " ±" +
                stats::format_number(s->equivalence_bound_ulp) + " ULP";
    }
    return "equivalent within " + bounds + " (every bucket's 1 - 2Φ(-" + stats::format_number(r.thresholds.z_star) +
           ") interval inside)";
  }
  // The deciding statistic furthest from equivalence names the figures.
  const BiasStatisticResult* worst = nullptr;
  for (const auto* s : {&r.signed_statistic, &r.magnitude_statistic}) {
    if (s->deciding && !s->equivalent && (worst == nullptr || s->widest_ulp / s->equivalence_bound_ulp > worst->widest_ulp / worst->equivalence_bound_ulp))
      worst = s;
  }
  if (worst == nullptr) return "not shown equivalent";
  std::string need = worst->replicates_needed == 0 ? std::string("no R would show it: a bucket's mean is at or beyond the bound")
                     : worst->replicates_needed > (std::uint64_t{1} << 20) ? std::string("equivalence would need R > 2^20")
                                                                          : "equivalence would need R ≈ " + std::to_string(worst->replicates_needed);
  return "not shown equivalent: " + std::string(stats::to_string(worst->statistic)) + " interval up to ±" +
         stats::format_number(worst->widest_ulp) + " ULP at bucket " + std::to_string(worst->widest_bucket) + " against ±" +
         stats::format_number(worst->equivalence_bound_ulp) + " (" + need + ")";
}

std::string blind_words(const BiasResult& r) {
  std::string out;
  std::uint64_t need = 0;
  for (const auto* s : {&r.signed_statistic, &r.magnitude_statistic}) {
    if (!s->deciding || !s->blind_at_floor) continue;
    out += (out.empty() ? "" : "; ") + std::string(stats::to_string(s->statistic)) + ": the typical " + r.axis +
           " bucket's interval is ±" + stats::format_number(s->typical_half_width_ulp) + " ULP, not inside its floor ±" +
           stats::format_number(s->equivalence_bound_ulp) + " ULP";
    need = std::max(need, s->replicates_to_see_floor);
  }
  if (out.empty()) return out;
  const std::string r_needed = need > (std::uint64_t{1} << 20) ? std::string("more than 2^20 replicates")
                                                               : "R >= " + std::to_string(need);
  return "INCONCLUSIVE at R = " + std::to_string(r.replicates) + " (|z| cut " + stats::format_number(r.z_cut) +
         "): an effect at the floor could not be significant (" + out + "); seeing one needs " + r_needed;
}

BiasResult BiasAccumulator::decide(const stats::BiasThresholds& thresholds,
                                   const std::vector<stats::BiasStatistic>& deciding, stats::FloatFormat working,
                                   const std::string& axis) const {
  const auto n = replicates();
  if (n < 2) throw std::invalid_argument("bias gate: needs at least 2 replicates, got " + std::to_string(n));
  std::vector<double> scale(buckets()), ulp(buckets());
  const double max_w = stats::max_finite(working);
  double output_scale = 0.0;  // mean |oracle| over the whole output (buckets weighted alike)
  for (std::size_t g = 0; g < buckets(); ++g) {
    scale[g] = scale_sum_[g] / static_cast<double>(n);
    output_scale += scale[g] / static_cast<double>(buckets());
  }
  // A bucket's ULP is taken at no less than one ULP of the output's scale. A bucket far
  // below the output's bulk (an expert the router almost never picks: mean |oracle| 6.4e-6)
  // holds values at the bulk's rounding level, which its own ULP cannot measure: its ULP
  // effect ran to 1.1e6 and the indifference zone vanished where almost nothing is
  // computed (issue 30). A bucket's scale is floored at ULP(S), S the output's mean |oracle|:
  // a value below one ULP of the output's typical magnitude vanishes in a sum with it, so no
  // bucket is judged as if it held smaller values than that. Its ULP is then at least
  // ULP(ULP(S)), about 2^-(p-1)·ULP(S) (p: W's precision): the floor grants a small bucket a
  // relative tolerance of c·u_g/scale_g, and leaves every bucket within a factor 2^(p-1) of S
  // as before. An output that is 0 everywhere keeps ulp_spacing(0), the smallest subnormal.
  const double floor_at = output_scale > 0.0 ? stats::ulp_spacing(std::min(output_scale, max_w), working) : 0.0;
  for (std::size_t g = 0; g < buckets(); ++g) {
    ulp[g] = stats::ulp_spacing(std::min(std::max(scale[g], floor_at), max_w), working);
  }
  BiasResult r;
  r.axis = axis;
  r.buckets = static_cast<std::int64_t>(buckets());
  r.replicates = n;
  r.thresholds = thresholds;
  // Each bucket is tested at the two-sided level 2Φ(-z*) (t_cut), so the union bound over
  // G buckets is 2GΦ(-z*) as printed; the horizon uses the same cut.
  r.z_cut = stats::t_cut(n, thresholds.z_star);
  // Every deciding statistic tests every bucket: the union runs over both.
  r.union_bound = stats::union_bound_false_alarm(buckets() * std::max<std::size_t>(1, deciding.size()), thresholds.z_star);
  r.horizon = stats::certified_horizon(n, r.z_cut);
  // Each statistic is judged with its own ULP floor (BiasThresholds::c_of).
  const auto floors_of = [&](stats::BiasStatistic s) {
    auto t = thresholds;
    t.c = thresholds.c_of(s);
    return t;
  };
  r.attribution = attributable_;
  r.signed_statistic = judge(signed_, signed_values_, attributable_ ? &signed_sides_ : nullptr, scale, ulp,
                             stats::BiasStatistic::signed_difference,
                             floors_of(stats::BiasStatistic::signed_difference), r.z_cut);
  r.magnitude_statistic = judge(magnitude_, magnitude_values_, attributable_ ? &magnitude_sides_ : nullptr, scale, ulp,
                                stats::BiasStatistic::magnitude, floors_of(stats::BiasStatistic::magnitude), r.z_cut);
  r.equivalent = !deciding.empty();
  for (auto s : deciding) {
    auto& res = s == stats::BiasStatistic::signed_difference ? r.signed_statistic : r.magnitude_statistic;
    res.deciding = true;
    r.verdict = stats::worst(r.verdict, res.verdict);
    r.equivalent = r.equivalent && res.equivalent;
  }
  // Observed against allowed (issue 32), the deciding statistics only: "of 256 channel
  // buckets: signed 47 FAIL / 160 WARN (max |z| 79.82 > cut 5.13; worst channel 29: -0.452
  // ULP against the floor 0.3, z -79.82); magnitude ...", or "(max |z| 3.1 <= cut 5.13)".
  r.reason = "of " + std::to_string(r.buckets) + " " + axis + " buckets:";
  for (const auto* s : {&r.signed_statistic, &r.magnitude_statistic}) {
    if (!s->deciding) continue;
    r.reason += std::string(r.reason.back() == ':' ? " " : "; ") + std::string(stats::to_string(s->statistic)) + " " +
                std::to_string(s->fail_buckets) + " FAIL / " + std::to_string(s->warn_buckets) + " WARN (max |z| " +
                stats::format_number(s->max_abs_z) + (s->max_abs_z > r.z_cut ? " > cut " : " <= cut ") +
                stats::format_number(r.z_cut);
    if (!s->flagged.empty()) {
      const auto& w = s->flagged.front();  // by |z|, largest first
      r.reason += "; worst " + axis + " " + std::to_string(w.bucket) + ": " + (w.direction < 0 ? "-" : "+") +
                  stats::format_number(w.ulp_effect) + " ULP against the floor " +
                  stats::format_number(thresholds.c_of(s->statistic)) + ", z " + stats::format_number(w.z);
    }
    r.reason += ")";
  }
  // A PASS says what it rests on (issue 32): nothing, when a deciding statistic could not
  // see an effect at its floor (INCONCLUSIVE); else shown equivalent within ±c, or only not
  // detected, with the widest interval and the R equivalence would need.
  if (r.verdict == Verdict::pass) {
    const std::string blind = blind_words(r);
    if (!blind.empty()) {
      r.verdict = Verdict::inconclusive;
      r.reason += "; " + blind;
    } else {
      r.reason += "; " + equivalence_words(r);
    }
  }
  // "; 64 FAIL buckets attributed to the reference: ..." once per gate, with the worst one.
  std::int64_t attributed = 0;
  const BucketReport* example = nullptr;
  for (const auto* s : {&r.signed_statistic, &r.magnitude_statistic}) {
    if (!s->deciding) continue;
    attributed += s->attributed_buckets;
    for (const auto& b : s->flagged)
      if (b.attributed && (example == nullptr || std::fabs(b.z) > std::fabs(example->z))) example = &b;
  }
  if (attributed > 0) {
    r.reason += "; " + std::to_string(attributed) +
                " FAIL bucket(s) attributed to the reference: it is biased against the fp64 oracle and the production is "
                "closer to exact (review: the migration changes the arithmetic, towards exact)";
    if (example != nullptr) {
      r.reason += "; e.g. bucket " + std::to_string(example->bucket) + ": ref - oracle " +
                  stats::format_number(example->ref_error.ulp_effect) + " ULP (|z| " +
                  stats::format_number(std::fabs(example->ref_error.z)) + "), prod - oracle " +
                  stats::format_number(example->prod_error.ulp_effect) + " ULP (|z| " +
                  stats::format_number(std::fabs(example->prod_error.z)) + ")";
    }
  }
  return r;
}

void BiasGate::observe(const ReplicateBatch& batch) {
  if (batch.nonfinite) {
    nonfinite_reason_ = nonfinite_reason(*batch.nonfinite);
    return;
  }
  auto r = batch.first;
  for (const auto& o : batch.replicates) {
    if (r++ >= settings_.replicates) break;
    if (!moments_) moments_.emplace(o.delta.size());
    const BiasAccumulator::SideErrors errors{o.ref_error, o.ref_error_magnitude, o.prod_error, o.prod_error_magnitude};
    moments_->add(o.delta, o.magnitude, o.abs_oracle, o.peak, settings_.attribution ? &errors : nullptr);
  }
}

BiasResult BiasGate::decide() const {
  if (!nonfinite_reason_.empty() || !moments_) {
    BiasResult r;
    r.verdict = Verdict::fail;
    r.reason = nonfinite_reason_.empty() ? std::string("no replicate was observed") : nonfinite_reason_;
    r.axis = settings_.axis;
    return r;
  }
  return moments_->decide(settings_.thresholds, settings_.deciding, working_, settings_.axis);
}

}  // namespace kcert::gates
