#pragma once
// Numbers in reasons and error messages: `digits` significant digits, %g style
// ("75.65", "2.867e-07", "256").
#include <sstream>
#include <string>

namespace kcert::stats {

inline std::string format_number(double v, int digits = 4) {
  std::ostringstream os;
  os.precision(digits);
  os << v;
  return os.str();
}

}  // namespace kcert::stats
