#include "eval/falsifiability.hpp"

#include <cmath>
#include <stdexcept>

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

ControlOutcome outcome(const engine::CaseResult& r) {
  ControlOutcome o;
  o.id = r.testcase.id;
  o.kind = r.testcase.kind == contract::Kind::negative ? "negative" : "positive";
  o.family = r.testcase.family;
  o.error = r.error;
  o.verdict = r.verdict;
  o.algebra = r.algebra.verdict;
  o.bias = r.bias.verdict;
  o.variance = r.variance.verdict;
  o.bias_magnitude = bias_with_magnitude(r);
  o.assert_close = r.baselines.assert_close.flagged;
  o.flash_attention = r.baselines.flash_attention.flagged;
  o.dynamo_fp64 = r.baselines.dynamo_fp64.flagged;
  o.unexpected = r.unexpected;
  if (std::isfinite(r.variance.tail.U)) o.variance_u = r.variance.tail.U;
  if (r.variance.tail.mode == stats::TailMode::fitted && std::isfinite(r.variance.tail.se)) o.variance_se = r.variance.tail.se;
  o.short_evidence = r.error.empty() && !r.nonfinite && r.variance.verdict == Verdict::pass && !r.variance.evidence.reaches_horizon;
  if (r.variance.confirmation) o.confirmation_agrees = r.variance.confirmation->agrees;
  return o;
}

namespace {
Verdict verdict_at(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j.at(key).is_string()) throw std::invalid_argument(where + "." + key + ": missing verdict");
  const auto v = stats::parse_verdict(j.at(key).get<std::string>());
  if (!v) throw std::invalid_argument(where + "." + key + ": not a verdict: " + j.at(key).get<std::string>());
  return *v;
}
std::optional<double> finite_number(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j.at(key).is_number()) return std::nullopt;
  const double x = j.at(key).get<double>();
  return std::isfinite(x) ? std::optional<double>(x) : std::nullopt;
}
}  // namespace

ControlOutcome outcome_from_document(const nlohmann::json& d) {
  ControlOutcome o;
  if (!d.is_object() || !d.contains("id")) throw std::invalid_argument("result document without an id");
  o.id = d.at("id").get<std::string>();
  o.kind = d.value("kind", "");
  o.family = d.value("family", "");
  if (d.contains("error")) {
    o.error = d.at("error").get<std::string>();
    o.verdict = Verdict::fail;
    return o;
  }
  const auto& g = d.at("gates");
  o.verdict = verdict_at(d, "verdict", o.id);
  o.algebra = verdict_at(g.at("algebra"), "verdict", o.id + ".gates.algebra");
  o.bias = verdict_at(g.at("bias"), "verdict", o.id + ".gates.bias");
  o.variance = verdict_at(g.at("variance"), "verdict", o.id + ".gates.variance");
  o.bias_magnitude = stats::worst(o.bias, stats::worst(verdict_at(g.at("bias").at("signed"), "verdict", o.id),
                                                       verdict_at(g.at("bias").at("magnitude"), "verdict", o.id)));
  const auto& b = d.at("baselines");
  o.assert_close = b.at("assert_close").at("flagged").get<bool>();
  o.flash_attention = b.at("flash_attention").at("flagged").get<bool>();
  o.dynamo_fp64 = b.at("dynamo_fp64").at("flagged").get<bool>();
  for (const auto& u : d.value("unexpected", nlohmann::json::array())) o.unexpected.push_back(u.get<std::string>());
  o.variance_u = finite_number(g.at("variance"), "U");
  const auto& tail = g.at("variance").value("tail", nlohmann::json::object());
  if (tail.value("mode", "") == "fitted") o.variance_se = finite_number(tail, "se");
  // Documents stored before the evidence block carry none: nothing is claimed for them.
  const auto& v = g.at("variance");
  if (v.contains("evidence") && v.at("evidence").is_object()) {
    o.short_evidence = o.variance == Verdict::pass && !v.at("evidence").value("reaches_horizon", true);
  }
  if (v.contains("confirmation") && v.at("confirmation").is_object()) {
    o.confirmation_agrees = v.at("confirmation").value("agrees", true);
  }
  return o;
}

Falsifiability tabulate(const std::vector<engine::CaseResult>& results) {
  std::vector<ControlOutcome> outcomes;
  for (const auto& r : results) outcomes.push_back(outcome(r));
  return tabulate(outcomes);
}

Falsifiability tabulate(const std::vector<ControlOutcome>& outcomes) {
  Falsifiability f;
  for (const auto& r : outcomes) {
    if (!r.error.empty()) {
      ++f.errors;
      f.unexpected.push_back(r.id + ": harness error: " + r.error);
      continue;
    }
    const bool neg = r.kind == "negative";
    (neg ? f.negatives : f.positives)++;
    count(f.algebra, neg, r.algebra);
    count(f.bias, neg, r.bias);
    count(f.variance, neg, r.variance);
    count(f.combined, neg, r.verdict);
    count(f.bias_with_magnitude, neg, r.bias_magnitude);
    count(f.combined_with_magnitude, neg, stats::worst(r.verdict, r.bias_magnitude));
    count_flag(f.assert_close, neg, r.assert_close);
    count_flag(f.flash_attention, neg, r.flash_attention);
    count_flag(f.dynamo_fp64, neg, r.dynamo_fp64);
    if (r.short_evidence) ++(neg ? f.short_evidence_negatives : f.short_evidence_positives);
    if (r.confirmation_agrees) {
      ++f.confirmed;
      f.confirmation_disagreed += !*r.confirmation_agrees;
    }
    if (r.unexpected.empty()) ++f.expectations_met;
    for (const auto& u : r.unexpected) f.unexpected.push_back(r.id + ": " + u);
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
          {"variance_pass_short_of_horizon", {{"negatives", f.short_evidence_negatives}, {"positives", f.short_evidence_positives}}},
          {"variance_confirmations", {{"confirmed", f.confirmed}, {"disagreed", f.confirmation_disagreed}}},
          {"expectations_met", f.expectations_met},
          {"unexpected", f.unexpected}};
}

}  // namespace kcert::eval
