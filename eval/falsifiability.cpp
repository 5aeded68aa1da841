#include "eval/falsifiability.hpp"

namespace kcert::eval {

using stats::Verdict;

stats::Verdict bias_with_magnitude(const engine::CaseResult& r) {
  return stats::worst(r.bias.verdict, stats::worst(r.bias.signed_statistic.verdict, r.bias.magnitude_statistic.verdict));
}

namespace {
void count(Tally& t, bool negative, Verdict v) {
  if (negative) t.detected += v != Verdict::pass;
  else {
    t.false_fail += v == Verdict::fail;
    t.false_warn += v == Verdict::warn;
  }
}
void count_flag(Tally& t, bool negative, bool flagged) {
  if (negative) t.detected += flagged;
  else t.false_fail += flagged;
}
nlohmann::json tally_json(const Tally& t) {
  return {{"negatives_detected", t.detected}, {"positives_fail", t.false_fail}, {"positives_warn", t.false_warn}};
}
}  // namespace

Falsifiability tabulate(const std::vector<engine::CaseResult>& results) {
  Falsifiability f;
  for (const auto& r : results) {
    if (!r.error.empty()) {
      ++f.errors;
      f.unexpected.push_back(r.testcase.id + ": harness error: " + r.error);
      continue;
    }
    const bool neg = r.testcase.kind == testcase::Kind::negative;
    (neg ? f.negatives : f.positives)++;
    count(f.algebra, neg, r.algebra.verdict);
    count(f.bias, neg, r.bias.verdict);
    count(f.variance, neg, r.variance.verdict);
    count(f.combined, neg, r.verdict);
    const auto bm = bias_with_magnitude(r);
    count(f.bias_with_magnitude, neg, bm);
    count(f.combined_with_magnitude, neg, stats::worst(r.verdict, bm));
    count_flag(f.assert_close, neg, r.baselines.assert_close.flagged);
    count_flag(f.flash_attention, neg, r.baselines.flash_attention.flagged);
    count_flag(f.dynamo_fp64, neg, r.baselines.dynamo_fp64.flagged);
    if (r.unexpected.empty()) ++f.expectations_met;
    for (const auto& u : r.unexpected) f.unexpected.push_back(r.testcase.id + ": " + u);
  }
  return f;
}

nlohmann::json to_json(const Falsifiability& f) {
  return {{"negatives", f.negatives},
          {"positives", f.positives},
          {"errors", f.errors},
          {"gates",
           {{"algebra", tally_json(f.algebra)},
            {"bias", tally_json(f.bias)},
            {"variance", tally_json(f.variance)},
            {"combined", tally_json(f.combined)},
            {"bias_with_magnitude", tally_json(f.bias_with_magnitude)},
            {"combined_with_magnitude", tally_json(f.combined_with_magnitude)}}},
          {"baselines",
           {{"assert_close", tally_json(f.assert_close)},
            {"flash_attention", tally_json(f.flash_attention)},
            {"dynamo_fp64", tally_json(f.dynamo_fp64)}}},
          {"notes_reference", {{"negatives_detected", "29/30"}, {"positives_fail", "0/35"}, {"positives_warn", "2/35"}}},
          {"expectations_met", f.expectations_met},
          {"unexpected", f.unexpected}};
}

}  // namespace kcert::eval
