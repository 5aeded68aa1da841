#include "harness/report/control_view.hpp"

#include "eval/falsifiability.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

namespace kcert::report {

namespace {
std::string text_at(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : "";
}
// A number, or the "inf" / "-inf" a document stores for an infinite one (store::json_number).
std::optional<double> number_at(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return std::nullopt;
  const auto& x = j.at(key);
  if (x.is_number()) return x.get<double>();
  if (x == "inf") return std::numeric_limits<double>::infinity();
  if (x == "-inf") return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}
const nlohmann::json& object_at(const nlohmann::json& j, const char* key) {
  static const nlohmann::json none = nlohmann::json::object();
  return j.is_object() && j.contains(key) && j.at(key).is_object() ? j.at(key) : none;
}
// A string that may be absent (nullopt then, or when of another type).
std::optional<std::string> optional_text_at(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j.at(key).is_string()) return std::nullopt;
  return j.at(key).get<std::string>();
}
bool bool_at(const nlohmann::json& j, const char* key, bool otherwise) {
  return j.is_object() && j.contains(key) && j.at(key).is_boolean() ? j.at(key).get<bool>() : otherwise;
}
// A list's entries as text: a string as it is, anything else as its JSON.
std::vector<std::string> texts_at(const nlohmann::json& j, const char* key) {
  std::vector<std::string> out;
  if (!j.is_object() || !j.contains(key) || !j.at(key).is_array()) return out;
  for (const auto& x : j.at(key)) out.push_back(x.is_string() ? x.get<std::string>() : x.dump());
  return out;
}

PointView point_view(const nlohmann::json& p) {
  PointView v;
  v.name = text_at(p, "name");
  v.probe = text_at(p, "probe");
  v.input = text_at(p, "input");
  v.bucket_axis = text_at(p, "bucket_axis");
  v.reduces = text_at(p, "reduces");
  if (p.contains("reduction_size") && p.at("reduction_size").is_number_integer() && p.at("reduction_size").get<std::int64_t>() > 0)
    v.reduction_size = p.at("reduction_size").get<double>();
  v.verdict = text_at(p, "verdict");
  v.algebra = text_at(p, "algebra");
  v.bias = text_at(p, "bias");
  v.variance = text_at(p, "variance");
  v.algebra_applicable = bool_at(p, "algebra_applicable", true);
  v.U = number_at(p, "U");
  v.max_abs_z = number_at(p, "max_abs_z");
  return v;
}

// A swept case's "sweep" or a backward case's "backward" block: its rows under `rows`.
std::optional<BreakdownView> breakdown_view(const nlohmann::json& d, const char* key, const char* rows) {
  if (!d.contains(key) || !d.at(key).is_object()) return std::nullopt;
  const auto& block = d.at(key);
  BreakdownView v;
  const auto& decided = object_at(block, "decided_by");
  v.decided_algebra = text_at(decided, "algebra");
  v.decided_bias = text_at(decided, "bias");
  v.decided_variance = text_at(decided, "variance");
  if (block.contains(rows) && block.at(rows).is_array()) {
    for (const auto& p : block.at(rows))
      if (p.is_object()) v.points.push_back(point_view(p));
  }
  return v;
}

BiasView bias_view(const nlohmann::json& d) {
  BiasView v;
  const auto& bias = object_at(object_at(d, "gates"), "bias");
  if (!bias.contains("signed")) return v;
  v.present = true;
  v.axis = text_at(bias, "axis");
  v.buckets = number_at(bias, "buckets");
  v.replicates = number_at(bias, "replicates");
  const auto& th = object_at(bias, "thresholds");
  v.z_cut = number_at(th, "z_cut");
  v.s_min = number_at(th, "s_min");
  v.c = number_at(th, "c");
  v.c_magnitude = number_at(th, "c_magnitude");
  const auto& params = object_at(object_at(d, "probe"), "params");
  for (const char* statistic : {"signed", "magnitude"}) {
    const auto& st = object_at(bias, statistic);
    const auto count = [&](const char* key) {
      return st.contains(key) && st.at(key).is_number() ? st.at(key).get<std::int64_t>() : std::int64_t{0};
    };
    v.flagged_counts.emplace_back(statistic, count("fail_buckets") + count("warn_buckets"));
    if (!st.contains("flagged") || !st.at("flagged").is_array()) continue;
    for (const auto& b : st.at("flagged")) {
      if (!b.is_object() || !b.contains("bucket") || !b.at("bucket").is_number_integer()) continue;
      FlaggedBucketView f;
      f.statistic = statistic;
      f.bucket = b.at("bucket").get<std::int64_t>();
      f.label = bucket_label(v.axis, f.bucket, params);
      const bool down = b.contains("direction") && b.at("direction").is_number() && b.at("direction").get<double>() < 0;
      if (b.contains("ulp_effect") && b.at("ulp_effect").is_number())
        f.signed_ulp = (down ? -1.0 : 1.0) * b.at("ulp_effect").get<double>();
      f.ulp_effect = number_at(b, "ulp_effect");
      f.z = number_at(b, "z");
      f.effect = number_at(b, "effect");
      f.verdict = text_at(b, "verdict");
      f.attributed = bool_at(b, "attributed", false);
      v.flagged.push_back(std::move(f));
    }
  }
  for (const char* statistic : {"signed", "magnitude"}) {
    const auto& st = object_at(bias, statistic);
    for (const char* list : {"flagged", "top"}) {
      if (!st.contains(list) || !st.at(list).is_array()) continue;
      for (const auto& b : st.at(list))
        if (b.is_object()) v.kept.push_back({statistic, text_at(b, "verdict"), number_at(b, "ulp_effect"), number_at(b, "effect")});
    }
  }
  return v;
}

TailView tail_view(const nlohmann::json& d) {
  TailView v;
  const auto& tail = object_at(object_at(object_at(d, "gates"), "variance"), "tail");
  const auto& settings = object_at(tail, "settings");
  v.warn_k = number_at(settings, "warn_K").value_or(v.warn_k);
  v.fail_k = number_at(settings, "fail_K").value_or(v.fail_k);
  v.horizon = number_at(settings, "horizon").value_or(v.horizon);
  const auto finite = [&](const char* key) -> std::optional<double> {
    const auto x = number_at(tail, key);
    return x && std::isfinite(*x) ? x : std::nullopt;
  };
  const auto xi = finite("xi_clipped"), sigma = finite("sigma"), u = finite("u"), zeta = finite("zeta");
  if (text_at(tail, "mode") == "fitted" && xi && sigma && *sigma > 0 && u && zeta) {
    v.drawable_fit = true;
    v.xi = *xi, v.sigma = *sigma, v.u = *u, v.zeta = *zeta;
    v.r_t = finite("r_T");
  }
  return v;
}

}  // namespace

ControlView control_view(const nlohmann::json& d) {
  ControlView v;
  v.id = text_at(d, "id");
  v.kind = text_at(d, "kind");
  v.family = text_at(d, "family");
  v.verdict = text_at(d, "verdict");
  if (!d.is_object()) return v;
  if (d.contains("runtime") && d.at("runtime").is_object() && d.at("runtime").contains("seconds") &&
      d.at("runtime").at("seconds").is_number())
    v.seconds = d.at("runtime").at("seconds").get<double>();
  v.error = optional_text_at(d, "error");
  v.skipped = optional_text_at(d, "skipped");
  v.unexpected = texts_at(d, "unexpected");
  v.has_expectation = d.contains("expected") && d.at("expected").is_object() && !d.at("expected").empty();
  if (d.contains("expected") && d.at("expected").is_object()) {
    const auto& e = d.at("expected");
    v.expectation_stated = true;
    for (const char* gate : {"algebra", "bias", "variance"}) {
      if (e.contains(gate) && e.at(gate).is_array()) v.expected_gates.emplace_back(gate, texts_at(e, gate));
    }
    v.expected_note = optional_text_at(e, "note");
  }
  for (auto [side, key] : {std::pair{&v.reference, "reference"}, std::pair{&v.production, "production"}}) {
    side->variant = text_at(object_at(d, key), "variant");
    side->version = text_at(object_at(d, key), "version");
  }
  v.replicates = number_at(d, "replicates");
  v.mechanism = text_at(d, "mechanism");
  v.references = texts_at(d, "references");
  v.sweep = breakdown_view(d, "sweep", "settings");
  v.backward = breakdown_view(d, "backward", "gradients");
  if (v.backward) {
    const auto& dy = object_at(d.at("backward"), "dy");
    v.dy_kind = text_at(dy, "kind");
    v.dy_shift = number_at(dy, "shift");
    v.dy_scale = number_at(dy, "scale");
  }
  v.bias = bias_view(d);
  v.tail = tail_view(d);
  v.torch_version = text_at(object_at(d, "provenance"), "torch_version");
  v.device = text_at(object_at(d, "provenance"), "device");
  v.source = text_at(d, "source");
  v.case_text = optional_text_at(d, "case_text");
  if (d.contains("gates") && d.at("gates").is_object()) {
    const auto& g = d.at("gates");
    for (const char* gate : {"algebra", "bias", "variance"}) {
      const auto& one = object_at(g, gate);
      v.gates.push_back({gate, text_at(one, "verdict"), text_at(one, "reason")});
    }
    if (g.contains("variance")) {
      v.variance_short_of_horizon = eval::variance_pass_short_of_horizon(g.at("variance"));
      v.variance_u = number_at(g.at("variance"), "U");
    }
    v.algebra_applicable = bool_at(object_at(g, "algebra"), "applicable", true);
    for (const char* statistic : {"signed", "magnitude"}) {
      const auto& st = object_at(object_at(g, "bias"), statistic);
      if (st.contains("max_abs_z") && st.at("max_abs_z").is_number())
        v.max_abs_z = std::max(v.max_abs_z.value_or(-std::numeric_limits<double>::infinity()), st.at("max_abs_z").get<double>());
    }
  }
  return v;
}

// A bucket in the family's own terms: "channel 29", "position 17 x pair 5", "head 3 x
// position 40". The composite axes are decoded with the probe's shape (the kernels' bucket_ids:
// rotary.cpp t·(head_dim/2) + pair, attention.cpp head·tokens + position); without it the
// bare index is shown.
std::string bucket_label(const std::string& axis, std::int64_t bucket, const nlohmann::json& probe_params) {
  const auto size = [&](const char* key) -> std::int64_t {
    if (!probe_params.is_object() || !probe_params.contains(key) || !probe_params.at(key).is_number_integer()) return 0;
    return probe_params.at(key).get<std::int64_t>();
  };
  if (axis == "position_frequency" && size("shape.head_dim") >= 2) {
    const auto half = size("shape.head_dim") / 2;
    return fmt::format("position {} x pair {}", bucket / half, bucket % half);
  }
  // Attention's key-side gradients (dk, dv) bucket over kv_tokens: decoded only where the two agree.
  const bool kv_differs = size("shape.kv_tokens") > 0 && size("shape.kv_tokens") != size("shape.tokens");
  if (axis == "head_position" && size("shape.tokens") >= 1 && !kv_differs) {
    const auto tokens = size("shape.tokens");
    return fmt::format("head {} x position {}", bucket / tokens, bucket % tokens);
  }
  return (axis.empty() ? std::string("bucket") : axis) + " " + std::to_string(bucket);
}

const std::string& ControlView::gate_verdict(std::string_view gate) const {
  static const std::string none;
  for (const auto& g : gates)
    if (g.gate == gate) return g.verdict;
  return none;
}

std::vector<ControlView> control_views(const std::vector<nlohmann::json>& documents) {
  std::vector<ControlView> views;
  views.reserve(documents.size());
  for (const auto& d : documents) views.push_back(control_view(d));
  return views;
}

}  // namespace kcert::report
