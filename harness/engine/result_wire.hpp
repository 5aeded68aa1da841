#pragma once
// A CaseResult as bytes, for a case run in a child process (runner/isolated.hpp): every field the
// engine measured, bit for bit (doubles as stored, NaN and Inf included), except the test
// case, which the parent recomputes with as_run() from the case it handed over. One field
// list per struct (result_wire.cpp) serves both directions, so the two cannot disagree; a
// field added to a result struct goes into that list too (tests/engine compares to_json of
// a result run in process and of the same case run in a child).
#include <string>
#include <string_view>

#include "harness/engine/case_result.hpp"

namespace kcert::engine {

std::string encode_outcome(const CaseResult& result);

// Fills every field but `testcase`; throws std::runtime_error on truncated or malformed bytes.
void decode_outcome(std::string_view bytes, CaseResult& result);

}  // namespace kcert::engine
