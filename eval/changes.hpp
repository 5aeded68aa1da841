#pragma once
// What changed since the previous run of the same profile in the same environment, and
// the nightly's exit policy built on it (docs/operations.md).
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "eval/falsifiability.hpp"

namespace kcert::eval {

struct Change {
  std::string id, what;
  bool alarming = false;  // counts toward the nightly's "finding" status
};

// Per control present in both runs (and run without error now), one change at most: an escape
// (a negative no longer detected), a new false alarm (a positive newly FAILing), a new
// detection, a cleared false alarm, a per-gate verdict flip, or U moving by more than 3 of
// its se; with the figures that moved, before -> after (gate verdicts, U, max |z|, R).
std::vector<Change> compare_runs(const std::vector<ControlOutcome>& now,
                                 const std::map<std::string, ControlOutcome>& before);

// A run that earlier results were read from, as the comparison names it: the run, when and
// with what it ran, and what of it was compared.
struct BaselineRun {
  std::string run_id, started_at, kcert_version, profile;
  std::set<std::uint64_t> replicates;   // R of its compared results
  std::set<std::string> calibrations;   // "family: calibration" of its compared results
  int controls = 0;                     // how many of this run's controls it is the baseline of
};

// What a run is compared on: its kcert, R and calibrations.
struct RunFacts {
  std::string kcert_version;
  std::set<std::uint64_t> replicates;
  std::set<std::string> calibrations;
};

// One line per baseline run: "run ID (started ..., kcert V, profile P, R 64): N control(s)",
// and "; differs in R 64 -> 256; kcert 0.1 -> 0.2; calibration none -> rmsnorm: 3" where it
// differs from the run compared.
std::vector<std::string> describe_baselines(const RunFacts& now, const std::vector<BaselineRun>& before);

enum class NightlyStatus {
  ok,       // every control behaved as expected and nothing alarming changed
  finding,  // a control differs from its YAML expectation, or an alarming change
  error,    // a control could not be run (harness or input error)
};

struct NightlyVerdict {
  NightlyStatus status = NightlyStatus::ok;
  std::vector<std::string> reasons;  // one line each, for people
};

NightlyVerdict nightly_verdict(const Falsifiability& table, const std::vector<Change>& changes);

}  // namespace kcert::eval
