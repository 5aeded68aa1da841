#include "eval/changes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kcert::eval {

namespace {
std::string verdicts(const ControlOutcome& o) {
  return fmt::format("{}/{}/{}", stats::to_string(o.algebra), stats::to_string(o.bias), stats::to_string(o.variance));
}
}  // namespace

std::vector<Change> compare_runs(const std::vector<ControlOutcome>& now, const std::map<std::string, ControlOutcome>& before) {
  std::vector<Change> out;
  for (const auto& o : now) {
    const auto it = before.find(o.id);
    // An error or a skip (either run) measured nothing to compare.
    if (it == before.end() || !o.error.empty() || !o.skipped.empty() || !it->second.skipped.empty()) continue;
    const auto& p = it->second;
    if (o.kind == "negative" && p.detected() && !o.detected()) out.push_back({o.id, "ESCAPE: no longer detected", true});
    if (o.kind == "negative" && !p.detected() && o.detected()) out.push_back({o.id, "new detection", false});
    if (o.kind == "positive" && !p.false_fail() && o.false_fail()) out.push_back({o.id, "NEW FALSE ALARM (FAIL)", true});
    if (o.kind == "positive" && p.false_fail() && !o.false_fail()) out.push_back({o.id, "false alarm cleared", false});
    if (p.algebra != o.algebra || p.bias != o.bias || p.variance != o.variance) {
      out.push_back({o.id, "verdict flipped: algebra/bias/variance " + verdicts(p) + " -> " + verdicts(o), true});
    }
    if (o.variance_u && p.variance_u && o.variance_se && std::abs(*o.variance_u - *p.variance_u) > 3.0 * *o.variance_se) {
      out.push_back({o.id, fmt::format("U moved {:.4g} -> {:.4g} (more than 3 se = {:.3g})", *p.variance_u, *o.variance_u,
                                       3.0 * *o.variance_se),
                     false});
    }
  }
  return out;
}

NightlyVerdict nightly_verdict(const Falsifiability& table, const std::vector<Change>& changes) {
  NightlyVerdict v;
  if (table.errors > 0) {
    v.status = NightlyStatus::error;
    v.reasons.push_back(fmt::format("{} control(s) could not be run (harness or input error)", table.errors));
  }
  if (!table.unexpected.empty()) {
    v.reasons.push_back(fmt::format("{} verdict(s) differ from the YAML expectations", table.unexpected.size()));
  }
  const auto alarming = std::count_if(changes.begin(), changes.end(), [](const Change& c) { return c.alarming; });
  if (alarming > 0) {
    v.reasons.push_back(fmt::format("{} escape(s), new false alarm(s) or verdict flip(s) since the last run", alarming));
  }
  if (v.status == NightlyStatus::ok && !v.reasons.empty()) v.status = NightlyStatus::finding;
  return v;
}

}  // namespace kcert::eval
