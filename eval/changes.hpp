#pragma once
// What changed since the previous run of the same profile in the same environment, and
// the nightly's exit policy built on it (docs/operations.md).
#include <map>
#include <string>
#include <vector>

#include "eval/falsifiability.hpp"

namespace kcert::eval {

struct Change {
  std::string id, what;
  bool alarming = false;  // counts toward the nightly's "finding" status
};

// Per control present in both runs (and run without error now): an escape (a negative no
// longer detected), a new detection, a new false alarm (a positive newly FAILing), a
// cleared false alarm, any per-gate verdict flip, and U moving by more than 3 of its se.
std::vector<Change> compare_runs(const std::vector<ControlOutcome>& now,
                                 const std::map<std::string, ControlOutcome>& before);

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
