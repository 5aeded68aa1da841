#include "harness/report/control_view.hpp"

#include "eval/falsifiability.hpp"

#include <algorithm>
#include <limits>

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
  if (d.contains("error") && d.at("error").is_string()) v.error = d.at("error").get<std::string>();
  if (d.contains("skipped") && d.at("skipped").is_string()) v.skipped = d.at("skipped").get<std::string>();
  if (d.contains("unexpected") && d.at("unexpected").is_array()) {
    for (const auto& u : d.at("unexpected")) v.unexpected.push_back(u.is_string() ? u.get<std::string>() : u.dump());
  }
  v.has_expectation = d.contains("expected") && d.at("expected").is_object() && !d.at("expected").empty();
  if (d.contains("gates") && d.at("gates").is_object()) {
    const auto& g = d.at("gates");
    static const nlohmann::json none = nlohmann::json::object();
    for (const char* gate : {"algebra", "bias", "variance"}) {
      const auto& one = g.contains(gate) ? g.at(gate) : none;  // both lvalues: no copy of the gate
      v.gates.push_back({gate, text_at(one, "verdict"), text_at(one, "reason")});
    }
    if (g.contains("variance")) {
      v.variance_short_of_horizon = eval::variance_pass_short_of_horizon(g.at("variance"));
      v.variance_u = number_at(g.at("variance"), "U");
    }
    if (g.contains("algebra") && g.at("algebra").is_object() && g.at("algebra").contains("applicable") &&
        g.at("algebra").at("applicable").is_boolean())
      v.algebra_applicable = g.at("algebra").at("applicable").get<bool>();
    if (g.contains("bias") && g.at("bias").is_object()) {
      for (const char* statistic : {"signed", "magnitude"}) {
        const auto& bias = g.at("bias");
        if (!bias.contains(statistic) || !bias.at(statistic).is_object()) continue;
        const auto& st = bias.at(statistic);
        if (st.contains("max_abs_z") && st.at("max_abs_z").is_number())
          v.max_abs_z = std::max(v.max_abs_z.value_or(-std::numeric_limits<double>::infinity()), st.at("max_abs_z").get<double>());
      }
    }
  }
  return v;
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
