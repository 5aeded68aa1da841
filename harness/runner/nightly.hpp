#pragma once
// The nightly workflow as functions (the runner room, issue 51): which cases a shard runs,
// whether a run may take a shard, the calibrations of this environment applied to the cases,
// and a finished run read back as the report reads it (from the database, where the shards
// meet, or from this process's own results without one). `kcert nightly` parses its flags,
// calls these and prints; what they have to say goes to a Note.
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "eval/falsifiability.hpp"
#include "harness/contract/test_case.hpp"
#include "harness/engine/case_result.hpp"
#include "harness/runner/suite.hpp"
#include "harness/store/environment.hpp"
#include "harness/store/postgres.hpp"
#include "harness/store/spool.hpp"

namespace kcert::runner {

// Part K of N of a suite (0-based index).
struct Shard {
  int index = 0;
  int count = 1;
};

// "K/N" (1 <= K <= N) -> {K - 1, N}; "" -> the whole suite. Throws UsageError naming --shard.
Shard parse_shard(const std::string& text);

// The cases --filter keeps, sorted by id, case i to shard i mod N: every machine computes the
// same split from the same suite, whatever order the files were found in.
std::vector<contract::TestCase> select_shard(std::vector<contract::TestCase> cases, const std::vector<std::string>& filters,
                                             Shard shard);

// A run id names one run: refuses (InputError) to add to a run the database holds as closed,
// or to repeat a shard that has reported. A run the database does not know is fine (a new one).
void check_run_takes_shard(store::ResultStore& db, const std::string& run_id, Shard shard);

// Each family's newest calibration in this environment applied to its forward cases (a
// calibration is derived from a family's forward positives: a backward case keeps its own
// thresholds). Calibrations from before kcert-cal/2 carry no bias floors: the case keeps its own.
void apply_calibrations(std::vector<contract::TestCase>& cases, const std::map<std::string, store::Calibration>& calibrations);

// One past result of a control in the same environment and profile, oldest first.
struct HistoryPoint {
  std::string started_at, run_id, verdict;
  double u = -1;          // < 0: none (infinite or undefined)
  double max_abs_z = -1;  // < 0: none
};

// A run as its report reads it.
struct NightlyRun {
  std::string run_id, profile, source;  // source: "database" or "spool (PATH)"
  int shard_count = 1;
  std::vector<nlohmann::json> documents;
  std::map<std::string, std::vector<double>> khat;  // by case id
  std::vector<std::string> environments, calibrations;
  std::map<std::string, eval::ControlOutcome> previous;
  std::string previous_note;
  std::vector<std::string> baselines;  // the runs `previous` came from, one line each (eval::describe_baselines)
  std::map<std::string, std::vector<HistoryPoint>> history;  // by case id, same environment
  std::string history_note = "History needs the results database (this run's results come from its spool).";
  double seconds = -1;     // how long this process ran the controls (< 0: it did not run them all)
  std::string started_at;  // the run's start (UTC, ISO 8601; "" = not known)
};

// A run every shard of which has reported, read from the database with the previous finished
// run(s) of its profile in its environment (what changed since, against which run) and each
// control's history. `kcert_version` is this kcert's, to say what differs from a baseline.
// A run whose shards all reported but that is still marked running (a finish lost to a crash)
// is marked finished, and noted. Throws InputError for a run the database does not hold or one
// with shards missing (named); a stored document of another shape throws as eval's reader and
// nlohmann do (the caller names the run).
NightlyRun run_from_database(store::ResultStore& db, const std::string& run_id, const std::string& kcert_version,
                             const Note& note);

// This process's own results, when there is no database: nothing to compare with, no history.
NightlyRun run_from_results(const std::vector<engine::CaseResult>& results, const store::RunInfo& run,
                            const std::string& spool_path, const store::Environment& environment);

}  // namespace kcert::runner
