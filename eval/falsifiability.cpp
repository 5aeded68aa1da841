#include "eval/falsifiability.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace kcert::eval {

using stats::Verdict;

stats::Verdict bias_signed_only(const engine::CaseResult& r) { return r.bias.signed_statistic.verdict; }

namespace {
void count(Tally& t, bool negative, Verdict v) {
  if (negative) {
    t.detected += stats::flagged(v);
    t.negatives_inconclusive += v == Verdict::inconclusive;
  } else {
    t.false_fail += v == Verdict::fail;
    t.false_warn += v == Verdict::warn;
    t.positives_inconclusive += v == Verdict::inconclusive;
  }
}
void count_flag(Tally& t, bool negative, bool flagged) {
  if (negative) t.detected += flagged;
  else t.false_fail += flagged;
}
nlohmann::json tally_json(const Tally& t) {
  return {{"negatives_detected", t.detected},
          {"positives_fail", t.false_fail},
          {"positives_warn", t.false_warn},
          {"negatives_inconclusive", t.negatives_inconclusive},
          {"positives_inconclusive", t.positives_inconclusive}};
}
}  // namespace

ControlOutcome outcome(const engine::CaseResult& r) {
  ControlOutcome o;
  o.id = r.testcase.id;
  o.kind = r.testcase.kind == contract::Kind::negative ? "negative" : "positive";
  o.family = r.testcase.family;
  o.direction = std::string(contract::to_string(r.testcase.direction));
  if (r.testcase.both_directions) o.case_id = r.testcase.case_id;
  o.error = r.error;
  o.skipped = r.skipped;
  o.torch_version = r.torch_version;
  o.verdict = r.verdict;
  if (r.ran()) o.bias_equivalent = r.bias.equivalent;
  o.algebra = r.algebra.verdict;
  o.algebra_applicable = !r.ran() || r.algebra.applicable;
  o.bias = r.bias.verdict;
  o.variance = r.variance.verdict;
  o.bias_signed_only = bias_signed_only(r);
  o.assert_close = r.baselines.assert_close.flagged;
  o.flash_attention = r.baselines.flash_attention.flagged;
  o.dynamo_fp64 = r.baselines.dynamo_fp64.flagged;
  o.unexpected = r.unexpected;
  o.expected_condition = r.testcase.expected.condition;
  for (const auto& [gate, verdicts] : r.testcase.expected.gates) {
    if (std::find(verdicts.begin(), verdicts.end(), stats::Verdict::fail) != verdicts.end()) o.expected_fail_gates.push_back(gate);
  }
  if (r.ran()) {
    o.replicates = r.bias.replicates;
    const double z = std::max(r.bias.signed_statistic.max_abs_z, r.bias.magnitude_statistic.max_abs_z);
    if (std::isfinite(z)) o.max_abs_z = z;
  }
  if (std::isfinite(r.variance.tail.U)) o.variance_u = r.variance.tail.U;
  if (r.variance.tail.mode == stats::TailMode::fitted && std::isfinite(r.variance.tail.se)) o.variance_se = r.variance.tail.se;
  o.short_evidence = r.ran() && !r.nonfinite && r.variance.verdict == Verdict::pass && !r.variance.evidence.reaches_horizon;
  o.frontier_signed = r.bias.signed_statistic.frontier;
  o.frontier_magnitude = r.bias.magnitude_statistic.frontier;
  o.attributed_signed = r.bias.signed_statistic.attributed_buckets;
  o.attributed_magnitude = r.bias.magnitude_statistic.attributed_buckets;
  o.signed_decides = r.bias.signed_statistic.deciding;
  o.magnitude_decides = r.bias.magnitude_statistic.deciding;
  o.s_min = r.bias.thresholds.s_min;
  o.bias_recomputable = r.ran() && !r.nonfinite;
  return o;
}

double ControlOutcome::max_ulp_effect(stats::BiasStatistic s) const {
  double m = 0.0;
  for (const auto& [effect, ulp] : s == stats::BiasStatistic::magnitude ? frontier_magnitude : frontier_signed) {
    m = std::max(m, ulp);
  }
  return m;
}

Verdict bias_verdict_under(const ControlOutcome& o, double c, double c_magnitude) {
  if (!o.bias_recomputable) return o.bias;
  Verdict v = Verdict::pass;
  const auto judge = [&](const std::vector<std::pair<double, double>>& frontier, double floor) {
    for (const auto& [effect, ulp] : frontier) {
      v = stats::worst(v, effect > o.s_min && ulp > floor ? Verdict::fail : Verdict::warn);
    }
  };
  if (o.signed_decides) judge(o.frontier_signed, c);
  if (o.magnitude_decides) judge(o.frontier_magnitude, c_magnitude);
  // An attributed bucket is a WARN whatever the floors (it is not on the frontier).
  if ((o.signed_decides && o.attributed_signed > 0) || (o.magnitude_decides && o.attributed_magnitude > 0))
    v = stats::worst(v, Verdict::warn);
  return v;
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

std::optional<double> variance_pass_short_of_horizon(const nlohmann::json& v) {
  // Documents stored before the evidence block carry none: nothing is claimed for them.
  if (!v.is_object() || !v.contains("verdict") || v.at("verdict") != "PASS") return std::nullopt;
  if (!v.contains("evidence") || !v.at("evidence").is_object()) return std::nullopt;
  const auto& e = v.at("evidence");
  if (!e.contains("reaches_horizon") || !e.at("reaches_horizon").is_boolean() || e.at("reaches_horizon").get<bool>())
    return std::nullopt;
  return e.contains("horizon") && e.at("horizon").is_number() ? e.at("horizon").get<double>() : std::nan("");
}

ControlOutcome outcome_from_document(const nlohmann::json& d) {
  ControlOutcome o;
  if (!d.is_object() || !d.contains("id")) throw std::invalid_argument("result document without an id");
  o.id = d.at("id").get<std::string>();
  o.kind = d.value("kind", "");
  o.family = d.value("family", "");
  if (d.contains("direction") && d.at("direction").is_string()) o.direction = d.at("direction").get<std::string>();
  if (d.contains("case") && d.at("case").is_object() && d.at("case").contains("id") && d.at("case").at("id").is_string())
    o.case_id = d.at("case").at("id").get<std::string>();
  if (d.contains("provenance") && d.at("provenance").is_object()) o.torch_version = d.at("provenance").value("torch_version", "");
  if (d.contains("error")) {
    o.error = d.at("error").get<std::string>();
    o.verdict = Verdict::fail;
    return o;
  }
  if (d.contains("skipped")) {
    o.skipped = d.at("skipped").get<std::string>();
    return o;
  }
  const auto& g = d.at("gates");
  o.verdict = verdict_at(d, "verdict", o.id);
  o.algebra = verdict_at(g.at("algebra"), "verdict", o.id + ".gates.algebra");
  if (g.at("algebra").contains("applicable") && g.at("algebra").at("applicable").is_boolean())
    o.algebra_applicable = g.at("algebra").at("applicable").get<bool>();
  o.bias = verdict_at(g.at("bias"), "verdict", o.id + ".gates.bias");
  o.variance = verdict_at(g.at("variance"), "verdict", o.id + ".gates.variance");
  o.bias_signed_only = verdict_at(g.at("bias").at("signed"), "verdict", o.id + ".gates.bias.signed");
  if (g.at("bias").contains("equivalent") && g.at("bias").at("equivalent").is_boolean())
    o.bias_equivalent = g.at("bias").at("equivalent").get<bool>();
  const auto& b = d.at("baselines");
  o.assert_close = b.at("assert_close").at("flagged").get<bool>();
  o.flash_attention = b.at("flash_attention").at("flagged").get<bool>();
  o.dynamo_fp64 = b.at("dynamo_fp64").at("flagged").get<bool>();
  for (const auto& u : d.value("unexpected", nlohmann::json::array())) o.unexpected.push_back(u.get<std::string>());
  if (d.contains("expected") && d.at("expected").is_object()) {
    const auto& e = d.at("expected");
    o.expected_condition = e.value("condition", "");
    for (const char* gate : {"algebra", "bias", "variance"}) {
      if (!e.contains(gate) || !e.at(gate).is_array()) continue;
      for (const auto& v : e.at(gate)) {
        if (v.is_string() && v.get<std::string>() == "FAIL") {
          o.expected_fail_gates.emplace_back(gate);
          break;
        }
      }
    }
  }
  o.variance_u = finite_number(g.at("variance"), "U");
  if (g.at("bias").contains("replicates") && g.at("bias").at("replicates").is_number_unsigned())
    o.replicates = g.at("bias").at("replicates").get<std::uint64_t>();
  for (const char* statistic : {"signed", "magnitude"}) {
    if (!g.at("bias").contains(statistic)) continue;
    if (const auto z = finite_number(g.at("bias").at(statistic), "max_abs_z"))
      o.max_abs_z = std::max(o.max_abs_z.value_or(0.0), *z);
  }
  const auto& tail = g.at("variance").value("tail", nlohmann::json::object());
  if (tail.value("mode", "") == "fitted") o.variance_se = finite_number(tail, "se");
  const auto& v = g.at("variance");
  o.short_evidence = variance_pass_short_of_horizon(v).has_value();
  if (v.contains("confirmation") && v.at("confirmation").is_object()) {
    o.confirmation_agrees = v.at("confirmation").value("agrees", true);
  }
  // The bias frontiers (documents from before they were stored cannot be re-judged).
  const auto& bias = g.at("bias");
  const auto frontier = [](const nlohmann::json& stat, std::vector<std::pair<double, double>>& out) {
    if (!stat.contains("frontier") || !stat.at("frontier").is_array()) return false;
    // Numbers, or "inf" where a constant non-zero difference made an effect infinite.
    const auto value = [](const nlohmann::json& x) -> std::optional<double> {
      if (x.is_number()) return x.get<double>();
      if (x.is_string() && x.get<std::string>() == "inf") return std::numeric_limits<double>::infinity();
      return std::nullopt;
    };
    for (const auto& pt : stat.at("frontier")) {
      if (!pt.is_array() || pt.size() != 2) return false;
      const auto e = value(pt[0]), u = value(pt[1]);
      if (!e || !u) return false;
      out.emplace_back(*e, *u);
    }
    return true;
  };
  const bool have = frontier(bias.at("signed"), o.frontier_signed) && frontier(bias.at("magnitude"), o.frontier_magnitude);
  if (bias.at("signed").contains("attributed_buckets") && bias.at("signed").at("attributed_buckets").is_number_integer())
    o.attributed_signed = bias.at("signed").at("attributed_buckets").get<std::int64_t>();
  if (bias.at("magnitude").contains("attributed_buckets") && bias.at("magnitude").at("attributed_buckets").is_number_integer())
    o.attributed_magnitude = bias.at("magnitude").at("attributed_buckets").get<std::int64_t>();
  o.signed_decides = bias.at("signed").value("deciding", true);
  o.magnitude_decides = bias.at("magnitude").value("deciding", false);
  if (bias.contains("thresholds") && bias.at("thresholds").is_object()) o.s_min = bias.at("thresholds").value("s_min", 0.2);
  o.bias_recomputable = have && !(d.contains("nonfinite") && d.at("nonfinite").is_object());
  return o;
}

Falsifiability tabulate(const std::vector<engine::CaseResult>& results) {
  std::vector<ControlOutcome> outcomes;
  for (const auto& r : results) outcomes.push_back(outcome(r));
  return tabulate(outcomes);
}

Falsifiability tabulate(const std::vector<ControlOutcome>& outcomes) {
  Falsifiability f;
  // A `direction: both` case: the worse verdict of its results that ran, by the file's id.
  std::map<std::string, std::pair<bool, Verdict>> both;  // case id -> (negative, worst verdict)
  for (const auto& r : outcomes) {
    if (r.case_id.empty() || !r.ran()) continue;
    auto [it, fresh] = both.try_emplace(r.case_id, r.kind == "negative", r.verdict);
    if (!fresh) it->second.second = stats::worst(it->second.second, r.verdict);
  }
  if (!both.empty()) {
    f.both_directions.emplace();
    for (const auto& [id, c] : both) {
      (c.first ? f.both_directions->negatives : f.both_directions->positives)++;
      count(f.both_directions->combined, c.first, c.second);
    }
  }
  for (const auto& r : outcomes) {
    if (f.torch_version.empty()) f.torch_version = r.torch_version;
    if (!r.skipped.empty()) {
      f.skipped.emplace_back(r.id, r.skipped);
      continue;
    }
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
    auto& dir = f.by_direction[r.direction];
    (neg ? dir.negatives : dir.positives)++;
    count(dir.combined, neg, r.verdict);
    count(f.bias_signed_only, neg, r.bias_signed_only);
    count(f.combined_signed_only, neg, stats::worst(r.algebra, stats::worst(r.bias_signed_only, r.variance)));
    count_flag(f.assert_close, neg, r.assert_close);
    count_flag(f.flash_attention, neg, r.flash_attention);
    count_flag(f.dynamo_fp64, neg, r.dynamo_fp64);
    if (r.short_evidence) ++(neg ? f.short_evidence_negatives : f.short_evidence_positives);
    if (!r.algebra_applicable) ++(neg ? f.algebra_not_applicable_negatives : f.algebra_not_applicable_positives);
    if (r.confirmation_agrees) {
      ++f.confirmed;
      f.confirmation_disagreed += !*r.confirmation_agrees;
    }
    if (r.unexpected.empty()) ++f.expectations_met;
    if (!neg && r.bias == Verdict::pass && r.bias_equivalent) {
      auto& fam = f.equivalence_by_family[r.family];
      if (*r.bias_equivalent) ++f.positives_equivalent, ++fam.first;
      else ++f.positives_not_shown_equivalent, ++fam.second;
    }
    if (!r.expected_condition.empty()) f.conditioned.emplace_back(r.id, r.expected_condition);
    for (const auto& u : r.unexpected) f.unexpected.push_back(r.id + ": " + u);
  }
  return f;
}

nlohmann::json to_json(const Falsifiability& f) {
  return {{"negatives", f.negatives},
          {"positives", f.positives},
          {"errors", f.errors},
          {"skipped", [&] {
             nlohmann::json list = nlohmann::json::array();
             for (const auto& [id, why] : f.skipped) list.push_back({{"id", id}, {"reason", why}});
             return list;
           }()},
          {"torch", f.torch_version},
          {"gates",
           {{"algebra", tally_json(f.algebra)},
            {"bias", tally_json(f.bias)},
            {"variance", tally_json(f.variance)},
            {"combined", tally_json(f.combined)},
            {"bias_signed_only", tally_json(f.bias_signed_only)},
            {"combined_signed_only", tally_json(f.combined_signed_only)}}},
          {"baselines",
           {{"assert_close", tally_json(f.assert_close)},
            {"flash_attention", tally_json(f.flash_attention)},
            {"dynamo_fp64", tally_json(f.dynamo_fp64)}}},
          {"notes_reference", {{"negatives_detected", "29/30"}, {"positives_fail", "0/35"}, {"positives_warn", "2/35"}}},
          {"variance_pass_short_of_horizon", {{"negatives", f.short_evidence_negatives}, {"positives", f.short_evidence_positives}}},
          {"algebra_not_applicable", {{"negatives", f.algebra_not_applicable_negatives}, {"positives", f.algebra_not_applicable_positives}}},
          {"variance_confirmations", {{"confirmed", f.confirmed}, {"disagreed", f.confirmation_disagreed}}},
          {"expectations_met", f.expectations_met},
          {"bias_equivalence_of_positives", [&] {
             nlohmann::json fam = nlohmann::json::object();
             for (const auto& [name, c] : f.equivalence_by_family) fam[name] = {{"equivalent", c.first}, {"not_shown_equivalent", c.second}};
             return nlohmann::json{{"equivalent", f.positives_equivalent},
                                   {"not_shown_equivalent", f.positives_not_shown_equivalent},
                                   {"by_family", fam}};
           }()},
          {"by_direction", [&] {
             nlohmann::json out = nlohmann::json::object();
             for (const auto& [d, t] : f.by_direction)
               out[d] = {{"negatives", t.negatives}, {"positives", t.positives}, {"combined", tally_json(t.combined)}};
             return out;
           }()},
          {"both_directions", f.both_directions ? nlohmann::json{{"negatives", f.both_directions->negatives},
                                                                  {"positives", f.both_directions->positives},
                                                                  {"combined", tally_json(f.both_directions->combined)}}
                                                : nlohmann::json(nullptr)},
          {"expected_under_condition", [&] {
             nlohmann::json list = nlohmann::json::array();
             for (const auto& [id, condition] : f.conditioned) list.push_back({{"id", id}, {"condition", condition}});
             return list;
           }()},
          {"unexpected", f.unexpected}};
}

}  // namespace kcert::eval
