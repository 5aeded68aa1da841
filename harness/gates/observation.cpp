#include "harness/gates/observation.hpp"

namespace kcert::gates {

std::string location_text(const Location& l) {
  std::string idx;
  for (auto i : l.index) idx += (idx.empty() ? "" : ",") + std::to_string(i);
  return "replicate " + std::to_string(l.replicate) + ", element [" + idx + "], bucket " + std::to_string(l.bucket);
}

std::string nonfinite_reason(const NonFinite& nf) {
  return "non-finite output (" + nf.value + ") from the " + nf.side + " at " + location_text(nf.where);
}

}  // namespace kcert::gates
