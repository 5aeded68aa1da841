#pragma once
// Checks on a JSON text before it is parsed (implemented in json.cpp).
#include <string_view>

namespace kcert::store {

// Whether a JSON text nests arrays and objects deeper than `limit`, counted on the text
// (strings skipped) before any parse: nlohmann's DOM copies, compares and destroys
// recursively, so a 100,000-deep array from a crafted file overflows the stack.
bool json_nested_deeper_than(std::string_view text, int limit);

}  // namespace kcert::store
