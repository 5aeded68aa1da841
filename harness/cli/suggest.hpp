#pragma once
// The commands' "did you mean" is the shared one (harness/text/suggest.hpp).
#include "harness/text/suggest.hpp"

namespace kcert::cli {
using text::closest;
using text::did_you_mean;
using text::edit_distance;
}  // namespace kcert::cli
