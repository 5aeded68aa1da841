#pragma once
// Console output for people: the verdict table and per-case diagnostics.
#include <ostream>
#include <vector>

#include "harness/engine/case_result.hpp"

namespace kcert::cli {

void print_verdict_table(std::ostream& out, const std::vector<engine::CaseResult>& results);
void print_case_details(std::ostream& out, const engine::CaseResult& result);

}  // namespace kcert::cli
