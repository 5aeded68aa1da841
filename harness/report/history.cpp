#include "harness/report/history.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "harness/text/escape.hpp"

namespace kcert::report {

namespace {

// A gate verdict column is NULL (read as "") for a harness ERROR, which ran no gate.
nlohmann::json gate_json(const std::string& v) { return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v); }
std::string gate_text(const std::string& v) { return v.empty() ? "-" : v; }

std::string opt(const std::optional<double>& v) { return v ? fmt::format("{:.4g}", *v) : "-"; }

nlohmann::json opt_json(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

bool flagged(const store::HistoryRow& r) {
  return r.kind == "negative" ? r.detected.value_or(false) : r.false_alarm.value_or(false);
}

HistoryTimeline read_timeline(const std::vector<store::HistoryRow>& rows) {
  HistoryTimeline t;
  t.verdict_changed.assign(rows.size(), false);
  std::map<std::string, std::string> last_by_env;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    auto it = last_by_env.find(r.fingerprint);
    t.verdict_changed[i] = it != last_by_env.end() && it->second != r.verdict;
    last_by_env[r.fingerprint] = r.verdict;
    if (flagged(r)) {
      if (!t.first_flagged) t.first_flagged = &r;
      t.last_flagged = &r;
    }
  }
  if (!rows.empty() && rows.front().kind == "positive") t.event = "false alarm";
  return t;
}

nlohmann::json history_json(const std::string& case_id, const std::vector<store::HistoryRow>& rows,
                            const HistoryTimeline& t, const std::string& kcert_version) {
  nlohmann::json out = {{"format", "kcert-history/1"}, {"kcert_version", kcert_version}, {"case", case_id},
                        {"runs", nlohmann::json::array()}};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    out["runs"].push_back({{"started_at", r.started_at}, {"run_id", r.run_id}, {"environment", r.fingerprint},
                           {"cpu_model", r.cpu_model}, {"gpu", r.gpu}, {"torch_version", r.torch_version},
                           {"verdict", r.verdict}, {"algebra", gate_json(r.algebra)}, {"bias", gate_json(r.bias)},
                           {"variance", gate_json(r.variance)}, {"U", opt_json(r.variance_u)},
                           {"max_abs_z", opt_json(r.max_abs_z)}, {"flagged", flagged(r)},
                           {"verdict_changed", static_cast<bool>(t.verdict_changed[i])},
                           {"reference_version", r.reference_version}, {"production_version", r.production_version},
                           {"profile", r.profile}, {"replicates", r.replicates}, {"kcert_version", r.kcert_version},
                           {"variance_short_of_horizon", r.variance_short}, {"algebra_applicable", r.algebra_applicable}});
  }
  const std::string event = t.event == "detection" ? "detection" : "false_alarm";
  out["first_" + event] = t.first_flagged ? nlohmann::json(t.first_flagged->run_id) : nlohmann::json(nullptr);
  out["last_" + event] = t.last_flagged ? nlohmann::json(t.last_flagged->run_id) : nlohmann::json(nullptr);
  return out;
}

void print_history_csv(std::ostream& out, const std::vector<store::HistoryRow>& rows, const HistoryTimeline& t) {
  out << "started_at,run_id,environment,cpu_model,gpu,torch_version,verdict,algebra,bias,variance,U,max_abs_z,"
         "flagged,verdict_changed,reference_version,production_version,profile,replicates,kcert_version,"
         "variance_short_of_horizon,algebra_applicable\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    out << fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.started_at, csv_field(r.run_id),
                       r.fingerprint, csv_field(r.cpu_model), csv_field(r.gpu), r.torch_version, r.verdict, r.algebra,
                       r.bias, r.variance, r.variance_u ? fmt::format("{}", *r.variance_u) : "",
                       r.max_abs_z ? fmt::format("{}", *r.max_abs_z) : "", flagged(r) ? "true" : "false",
                       t.verdict_changed[i] ? "true" : "false", csv_field(r.reference_version),
                       csv_field(r.production_version), csv_field(r.profile), r.replicates, csv_field(r.kcert_version),
                       r.variance_short ? "true" : "false", r.algebra_applicable ? "true" : "false");
  }
}

void print_history_table(std::ostream& out, const std::string& case_id, const std::vector<store::HistoryRow>& rows,
                         const HistoryTimeline& t) {
  const auto safe = [](const std::string& s) { return text::terminal_safe(s); };
  out << fmt::format("history of {} ({} run(s))\n", safe(case_id), rows.size());
  constexpr const char* kRow = "{:<20}  {:<26}  {:<16}  {:<8} {:>7} {:<8}  {:<7} {:<7} {:<7} {:<8} {:>9} {:>8}  {}\n";
  out << fmt::format(fmt::runtime(kRow), "started (UTC)", "run", "environment", "profile", "R", "kcert", "verdict", "algebra", "bias",
                     "variance", "U", "max |z|", "");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    // A variance PASS short of the horizon says so where the verdict is read (issue 32).
    out << fmt::format(fmt::runtime(kRow), safe(r.started_at), safe(r.run_id.substr(0, 26)), safe(r.fingerprint),
                       r.profile.empty() ? "-" : safe(r.profile), r.replicates, safe(r.kcert_version), safe(r.verdict),
                       r.algebra_applicable ? safe(gate_text(r.algebra)) : std::string("n/a"), safe(gate_text(r.bias)),
                       safe(gate_text(r.variance)) + (r.variance_short ? "*" : ""), opt(r.variance_u), opt(r.max_abs_z),
                       t.verdict_changed[i] ? "<- verdict changed" : "");
  }
  if (std::any_of(rows.begin(), rows.end(), [](const store::HistoryRow& r) { return r.variance_short; }))
    out << "PASS*: a variance PASS whose evidence supports fewer replicates than the horizon T\n";
  if (std::any_of(rows.begin(), rows.end(), [](const store::HistoryRow& r) { return !r.algebra_applicable; }))
    out << "n/a: the algebra gate did not run (an opaque production, exact=False: no fp64 mode)\n";
  std::map<std::string, const store::HistoryRow*> envs;
  for (const auto& r : rows) envs[r.fingerprint] = &r;
  for (const auto& [fp, r] : envs) {
    out << fmt::format("  environment {}: {} | GPU {} | LibTorch {} | kernels {} / {}\n", safe(fp), safe(r->cpu_model),
                       safe(r->gpu), safe(r->torch_version), safe(r->reference_version), safe(r->production_version));
  }
  const auto when = [&](const store::HistoryRow* r) { return r ? safe(r->started_at + " (" + r->run_id + ")") : "never"; };
  out << fmt::format("first {}: {}\nlast {}: {}\n", t.event, when(t.first_flagged), t.event, when(t.last_flagged));
}

}  // namespace kcert::report
