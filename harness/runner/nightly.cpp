#include "harness/runner/nightly.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <regex>
#include <set>
#include <utility>

#include "eval/changes.hpp"
#include "harness/runner/errors.hpp"
#include "harness/store/json.hpp"

namespace kcert::runner {

Shard parse_shard(const std::string& text) {
  if (text.empty()) return {};
  static const std::regex form(R"(^([0-9]+)/([0-9]+)$)");
  std::smatch m;
  if (!std::regex_match(text, m, form)) throw UsageError("--shard: expected K/N (e.g. 2/4), got '" + text + "'");
  // Digits only, leading zeros allowed; more than an int holds is out of range, not a crash.
  const auto number = [&](const std::ssub_match& digits) {
    int v = 0;
    const char* begin = text.data() + (digits.first - text.begin());
    const char* stop = begin + digits.length();
    const auto [end, ec] = std::from_chars(begin, stop, v);
    if (ec != std::errc() || end != stop)
      throw UsageError("--shard: K and N must be at most " + std::to_string(std::numeric_limits<int>::max()) + ", got '" + text + "'");
    return v;
  };
  const int k = number(m[1]), n = number(m[2]);
  if (n < 1 || k < 1 || k > n) throw UsageError("--shard: expected 1 <= K <= N, got '" + text + "'");
  return {k - 1, n};
}

std::vector<contract::TestCase> select_shard(std::vector<contract::TestCase> cases, const std::vector<std::string>& filters,
                                             Shard shard) {
  auto kept = filter_cases(std::move(cases), filters);
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  std::vector<contract::TestCase> mine;
  for (std::size_t i = 0; i < kept.size(); ++i) {
    if (static_cast<int>(i % static_cast<std::size_t>(shard.count)) == shard.index) mine.push_back(std::move(kept[i]));
  }
  return mine;
}

void check_run_takes_shard(store::ResultStore& db, const std::string& run_id, Shard shard) {
  const auto existing = db.run_summary(run_id);
  if (!existing) return;
  if (existing->status != "running") throw InputError("run " + run_id + " is already " + existing->status + "; choose a new --run-id");
  const auto& done = existing->shards_finished;
  if (std::find(done.begin(), done.end(), shard.index) != done.end()) {
    throw InputError(fmt::format("shard {}/{} of run {} has already reported", shard.index + 1, shard.count, run_id));
  }
}

void apply_calibrations(std::vector<contract::TestCase>& cases, const std::map<std::string, store::Calibration>& calibrations) {
  for (auto& tc : cases) {
    if (tc.direction != contract::Direction::forward) continue;
    const auto it = calibrations.find(tc.family);
    if (it == calibrations.end()) continue;
    tc.gates.variance.warn_k = it->second.warn_k;
    tc.gates.variance.fail_k = it->second.fail_k;
    if (it->second.bias_c) tc.gates.bias.c = *it->second.bias_c;
    if (it->second.bias_c_magnitude) tc.gates.bias.c_magnitude = *it->second.bias_c_magnitude;
    tc.calibration = it->second.label();
  }
}

namespace {

// Every shard reported, or InputError naming those that have not. A run whose shards all
// reported but that is still `running` (a finish lost to a crash, or two shards finishing at
// once under an older kcert) is closed here (issue 53, item 7), so it counts as a baseline for
// the next night's "since the last run".
void require_complete(store::ResultStore& db, const store::RunSummary& summary, const Note& note) {
  const bool every_shard_reported = static_cast<int>(summary.shards_finished.size()) >= summary.shard_count;
  if (every_shard_reported && summary.status == "running" && db.close_if_complete(summary.run_id) && note) {
    note("run " + summary.run_id + " had every shard reported but was still marked running; marked finished");
  }
  if (every_shard_reported) return;
  std::string missing;
  for (int k = 0; k < summary.shard_count; ++k) {
    if (std::find(summary.shards_finished.begin(), summary.shards_finished.end(), k) == summary.shards_finished.end()) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(k + 1);
    }
  }
  throw InputError(
      fmt::format("run {} is not complete: shard(s) {} of {} have not reported", summary.run_id, missing, summary.shard_count));
}

// Per control of this run: its R and calibration, to say what differs from each baseline.
struct ControlFacts {
  std::uint64_t replicates = 0;
  std::string calibration;  // "family: cal-N" or ""
};

// The previous finished run(s) of this profile in this environment: each control's outcome
// there, and the runs named with what differs from this one (issue 32, item 3).
void read_baselines(store::ResultStore& db, NightlyRun& run, const std::map<std::string, ControlFacts>& facts,
                    const std::string& kcert_version) {
  const auto previous = db.previous_results(run.run_id);
  std::map<std::string, eval::BaselineRun> baselines;
  std::map<std::string, eval::RunFacts> now_by_baseline;  // this run, on each baseline's controls only
  for (const auto& p : previous) {
    const auto o = eval::outcome_from_document(p.document);
    run.previous.emplace(p.case_id, o);
    auto& b = baselines[p.run_id];
    b.run_id = p.run_id;
    b.started_at = p.run_started_at;
    b.kcert_version = p.run_kcert_version;
    b.profile = p.run_profile;
    b.controls += 1;
    if (o.replicates > 0) b.replicates.insert(o.replicates);
    if (!p.calibration.empty()) b.calibrations.insert(p.family + ": " + p.calibration);
    auto& now = now_by_baseline[p.run_id];
    now.kcert_version = kcert_version;
    if (const auto it = facts.find(p.case_id); it != facts.end()) {
      if (it->second.replicates > 0) now.replicates.insert(it->second.replicates);
      if (!it->second.calibration.empty()) now.calibrations.insert(it->second.calibration);
    }
  }
  std::vector<eval::BaselineRun> runs;
  for (auto& [id, b] : baselines) runs.push_back(std::move(b));
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.started_at > b.started_at; });
  for (const auto& b : runs) run.baselines.push_back(eval::describe_baselines(now_by_baseline[b.run_id], {b}).front());
  run.previous_note = previous.empty() ? "no earlier finished run of this profile in this environment"
                                       : fmt::format("compared with {} control(s) of the previous run(s) of this profile "
                                                     "in the same environment",
                                                     previous.size());
}

// Each control's results in the run's environment, drawn only when the run has one.
void read_history(store::ResultStore& db, NightlyRun& run) {
  if (run.environments.size() != 1) {
    run.history_note = "History is drawn per environment; this run spans " + std::to_string(run.environments.size()) + ".";
    return;
  }
  run.history_note.clear();
  for (const auto& doc : run.documents) {
    store::HistoryQuery q;
    q.case_id = doc.value("id", "");
    q.environment = run.environments.front();
    auto& points = run.history[q.case_id];
    for (const auto& h : db.history(q))
      points.push_back({h.started_at, h.run_id, h.verdict, h.variance_u.value_or(-1), h.max_abs_z.value_or(-1)});
  }
}

}  // namespace

NightlyRun run_from_database(store::ResultStore& db, const std::string& run_id, const std::string& kcert_version,
                             const Note& note) {
  const auto summary = db.run_summary(run_id);
  if (!summary) throw InputError("run " + run_id + " is not in the database " + db.describe());
  require_complete(db, *summary, note);
  NightlyRun run;
  run.run_id = run_id;
  run.profile = summary->profile;
  run.shard_count = summary->shard_count;
  run.started_at = summary->started_at;
  run.source = "database";
  std::set<std::string> envs, cals;
  std::map<std::string, ControlFacts> facts;
  for (auto& r : db.run_results(run_id)) {
    envs.insert(r.fingerprint);
    const std::string calibration = r.calibration.empty() ? std::string() : r.family + ": " + r.calibration;
    if (!calibration.empty()) cals.insert(calibration);
    facts[r.case_id] = {eval::outcome_from_document(r.document).replicates, calibration};
    run.khat[r.case_id] = r.khat;
    run.documents.push_back(std::move(r.document));
  }
  run.environments.assign(envs.begin(), envs.end());
  run.calibrations.assign(cals.begin(), cals.end());
  read_baselines(db, run, facts, kcert_version);
  read_history(db, run);
  return run;
}

NightlyRun run_from_results(const std::vector<engine::CaseResult>& results, const store::RunInfo& info,
                            const std::string& spool_path, const store::Environment& environment) {
  NightlyRun run;
  run.run_id = info.run_id;
  run.profile = info.profile;
  run.shard_count = info.shard_count;
  run.source = "spool (" + spool_path + ")";
  run.environments = {environment.fingerprint};
  run.previous_note = "not compared: no database";
  run.started_at = info.started_at;
  for (const auto& r : results) {
    run.documents.push_back(store::to_json(r));
    run.khat[r.testcase.id] = r.variance.khat;
  }
  return run;
}

}  // namespace kcert::runner
