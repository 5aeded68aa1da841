#pragma once
// The nightly's HTML report: a static site that opens from disk (no server, no network, no
// script), with the plots a reader needs before trusting a tail fit (the K-hat tail with its
// GPD, mean residual life, threshold stability, QQ) and the bias plane. Plots are drawn by
// gnuplot (SVG); without gnuplot the pages say so and carry the numbers alone.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/runner/nightly.hpp"

namespace kcert::report {

using runner::HistoryPoint;

struct HtmlReportInput {
  nlohmann::json results;            // the nightly's results.json
  std::map<std::string, std::vector<double>> khat;  // K-hat samples by control id
  std::map<std::string, std::vector<HistoryPoint>> history;  // by control id
  std::string history_note;          // why there is no history ("" when there is)
  std::string environment_words;     // CPU, ISA, GPU, LibTorch, BLAS, compiler ("" = unknown)
  // Relative link from the pages to the run's folder (results.json, summary.md, tails/):
  // "../" for a nightly's own html/; "" = no links (the pages were written elsewhere).
  std::string run_folder_link;
  std::string junit_link;            // relative link to the run's JUnit file ("" = none)
};

struct HtmlReportSummary {
  int pages = 0;
  int plots = 0;
  std::string plot_note;  // "" or why plots are missing (no gnuplot)
};

// The environment in words when the run's results come from this machine's environment
// (one fingerprint, this one's), else "" (the page then says it does not know it).
std::string environment_words_if_here(const std::vector<std::string>& fingerprints);

// A results document the report cannot read: a field missing or of another type. what()
// names the result (results[i] (id 'x')) and the problem, without nlohmann's internal tags.
class ReportFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes out/index.html and out/<control>.html (plots in out/plots/, case files in out/yaml/).
// Throws ReportFormatError on a document it cannot read.
HtmlReportSummary write_html_report(const HtmlReportInput& input, const std::filesystem::path& out);

// A nightly report folder read back (`kcert report DIR`): FOLDER/results.json checked for the
// shape kcert writes (depth, JSON, fields), the K-hat samples of FOLDER/tails/ (links there are
// not followed), and, with_history, each control's history from the database (or why there is
// none). Throws runner::InputError naming the file and the problem.
HtmlReportInput read_report_folder(const std::filesystem::path& folder, bool with_history);

// A nlohmann type or range error in words, for a document that came from outside.
std::string json_problem(const nlohmann::json::exception& e);

}  // namespace kcert::report
