#pragma once
// Console output for people: the verdict table and per-case diagnostics.
#include <ostream>
#include <vector>

#include "eval/falsifiability.hpp"
#include "harness/engine/case_result.hpp"

namespace kcert::report {

void print_verdict_table(std::ostream& out, const std::vector<engine::CaseResult>& results);
void print_case_details(std::ostream& out, const engine::CaseResult& result);

// The falsifiability views (kcert suite, kcert nightly): one row per control with each
// gate, the bias gate with the magnitude statistic deciding, and today's checks; then the
// per-gate summary against the notes' reference figures. Console and Markdown.
void print_controls(std::ostream& out, const std::vector<eval::ControlOutcome>& results);
// An `expected_on` condition in words ("for a CPU whose bf16 GEMM accumulates in bf16 ...").
std::string condition_in_words(const std::string& condition);

void print_falsifiability(std::ostream& out, const eval::Falsifiability& f);
// The suite's one-line tally, last on the console: "68 controls: 30 negatives detected, 35
// positives not FAILed (2 WARN), 0 inconclusive, 3 skipped, 0 errors; 0 unexpected, in 37 min".
// `seconds` < 0: no duration (results read back, not run here).
std::string tally_line(const eval::Falsifiability& f, double seconds);
// "37 s" under two minutes, else "37 min".
std::string duration_text(double seconds);
void markdown_controls(std::ostream& out, const std::vector<eval::ControlOutcome>& results);
void markdown_falsifiability(std::ostream& out, const eval::Falsifiability& f);

}  // namespace kcert::report
