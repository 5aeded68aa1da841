#pragma once
// A nightly's report (the report room, issue 51): what the run's results say, once (outcomes,
// the falsifiability table, the changes since the last run, the nightly's status), and the
// report folder written from it: summary.md, results.json, tails/<case>.csv, html/ and a JUnit
// file where one is asked for. `kcert nightly` maps the status to its exit code and prints.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "eval/changes.hpp"
#include "eval/falsifiability.hpp"
#include "harness/report/html.hpp"
#include "harness/runner/nightly.hpp"

namespace kcert::report {

// The run's results read once, for every renderer.
struct NightlyAssessment {
  std::vector<eval::ControlOutcome> outcomes;  // sorted by kind, family, id
  eval::Falsifiability table;
  std::vector<eval::Change> changes;  // since the previous run (run.previous)
  eval::NightlyVerdict verdict;
};

// Throws as eval's document reader does (std::invalid_argument, nlohmann) on a document of
// another shape; the caller names the run.
NightlyAssessment assess_nightly(const runner::NightlyRun& run);

// The console's view: controls, falsifiability, and what changed since the last run.
void print_nightly(std::ostream& out, const runner::NightlyRun& run, const NightlyAssessment& a);

// How the report is shown beside the run's data.
struct NightlyFolderOptions {
  std::string junit;              // a JUnit file to write too ("" = none)
  std::string environment_words;  // this machine's environment in words ("" = not this machine's)
  int exit_status = 0;            // the nightly's, as results.json and summary.md state it
  std::string kcert_version;      // this kcert's, for results.json
};

// summary.md. Every text that comes from results, the database, plugins or paths passes
// through text::markdown_cell.
std::string nightly_summary_markdown(const runner::NightlyRun& run, const NightlyAssessment& a,
                                     const NightlyFolderOptions& options);

// results.json (format kcert-nightly/1, docs/schema/kcert-nightly-1.schema.json).
nlohmann::json nightly_results_document(const runner::NightlyRun& run, const NightlyAssessment& a,
                                        const NightlyFolderOptions& options);

// The run's data in the report folder `dir` (refused when another user owns or may write it or
// a parent; store::make_private_directories): summary.md, results.json and tails/. Returns the
// results document.
nlohmann::json write_nightly_data(const runner::NightlyRun& run, const NightlyAssessment& a,
                                  const NightlyFolderOptions& options, const std::filesystem::path& dir);

// The same results for readers: the JUnit file asked for and the HTML site in dir/html.
HtmlReportSummary write_nightly_site(const runner::NightlyRun& run, const nlohmann::json& results,
                                     const NightlyFolderOptions& options, const std::filesystem::path& dir);

// One kcert writes a report folder at a time (issue 53, item 9): two nightlies given one
// --report interleaved their pages, and the index named whichever run finished last. The lock
// (DIR/.kcert-report.lock, flock) is taken where the report is written, not at the start (the
// shards of one run may share a --report, and only the last one, or --finish, writes it), and
// a writer waits for the one before it rather than failing: two shards finishing together may
// both see the run complete and both write its (same) report. `waiting` is told once when it
// waits. Throws runner::InputError when the lock cannot be opened or taken.
class ReportFolderLock {
 public:
  ReportFolderLock(const std::string& dir, const std::function<void(const std::string&)>& waiting);
  ~ReportFolderLock();
  ReportFolderLock(const ReportFolderLock&) = delete;
  ReportFolderLock& operator=(const ReportFolderLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace kcert::report
