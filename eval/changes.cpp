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
    // One line per control: what happened first (the most serious), then the figures that
    // moved, before -> after, each said once.
    std::string headline;
    bool alarming = false;
    if (o.kind == "negative" && p.detected() && !o.detected()) headline = "ESCAPE: no longer detected", alarming = true;
    else if (o.kind == "positive" && !p.false_fail() && o.false_fail()) headline = "NEW FALSE ALARM (FAIL)", alarming = true;
    else if (o.kind == "negative" && !p.detected() && o.detected()) headline = "new detection";
    else if (o.kind == "positive" && p.false_fail() && !o.false_fail()) headline = "false alarm cleared";
    const bool flipped = p.algebra != o.algebra || p.bias != o.bias || p.variance != o.variance;
    const bool u_moved =
        o.variance_u && p.variance_u && o.variance_se && std::abs(*o.variance_u - *p.variance_u) > 3.0 * *o.variance_se;
    if (!flipped && !u_moved && headline.empty()) continue;
    if (flipped) {
      alarming = true;
      if (headline.empty()) headline = "verdict flipped";
    }
    if (headline.empty()) headline = "U moved";
    std::vector<std::string> figures;
    if (flipped) figures.push_back("algebra/bias/variance " + verdicts(p) + " -> " + verdicts(o));
    if (u_moved) {
      figures.push_back(fmt::format("U {:.4g} -> {:.4g} (more than 3 se = {:.3g})", *p.variance_u, *o.variance_u, 3.0 * *o.variance_se));
    } else if (flipped && o.variance_u && p.variance_u && *o.variance_u != *p.variance_u) {
      figures.push_back(fmt::format("U {:.4g} -> {:.4g}", *p.variance_u, *o.variance_u));
    }
    if (p.max_abs_z && o.max_abs_z && fmt::format("{:.4g}", *p.max_abs_z) != fmt::format("{:.4g}", *o.max_abs_z))
      figures.push_back(fmt::format("max |z| {:.4g} -> {:.4g}", *p.max_abs_z, *o.max_abs_z));
    if (p.replicates != o.replicates && p.replicates > 0 && o.replicates > 0)
      figures.push_back(fmt::format("R {} -> {}", p.replicates, o.replicates));
    std::string what = headline;
    for (const auto& f : figures) what += "; " + f;
    out.push_back({o.id, what, alarming});
  }
  return out;
}

std::vector<std::string> describe_baselines(const RunFacts& now, const std::vector<BaselineRun>& before) {
  std::vector<std::string> lines;
  const auto joined = [](const auto& set) {
    std::string s;
    for (const auto& x : set) s += (s.empty() ? "" : ", ") + fmt::format("{}", x);
    return s.empty() ? std::string("none") : s;
  };
  for (const auto& b : before) {
    std::string line = fmt::format("run {} (started {}, kcert {}, profile {}, R {}): {} control(s)", b.run_id,
                                   b.started_at, b.kcert_version, b.profile.empty() ? "contract shapes" : b.profile,
                                   joined(b.replicates), b.controls);
    std::vector<std::string> differs;
    if (!now.replicates.empty() && b.replicates != now.replicates)
      differs.push_back("R " + joined(b.replicates) + " -> " + joined(now.replicates));
    if (!now.kcert_version.empty() && b.kcert_version != now.kcert_version)
      differs.push_back("kcert " + b.kcert_version + " -> " + now.kcert_version);
    if (b.calibrations != now.calibrations)
      differs.push_back("calibration " + joined(b.calibrations) + " -> " + joined(now.calibrations));
    if (!differs.empty()) {
      line += "; differs in ";
      for (std::size_t i = 0; i < differs.size(); ++i) line += (i ? "; " : "") + differs[i];
    }
    lines.push_back(line);
  }
  return lines;
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
