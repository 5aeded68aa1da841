#include "harness/numerics/math_modes.hpp"

#include <stdexcept>

namespace kcert::numerics {

namespace {

using Field = std::optional<bool> MathModes::*;

const std::vector<std::pair<std::string, Field>>& fields() {
  static const std::vector<std::pair<std::string, Field>> f = {
      {"tf32_matmul", &MathModes::tf32_matmul},
      {"tf32_cudnn", &MathModes::tf32_cudnn},
      {"bf16_reduced_precision_reduction", &MathModes::bf16_reduced_precision_reduction},
      {"fp16_reduced_precision_reduction", &MathModes::fp16_reduced_precision_reduction},
      {"deterministic_algorithms", &MathModes::deterministic_algorithms},
      {"cudnn_benchmark", &MathModes::cudnn_benchmark},
  };
  return f;
}

}  // namespace

const std::vector<std::string>& math_mode_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& [name, field] : fields()) n.push_back(name);
    return n;
  }();
  return names;
}

MathModes pinned_math_modes() {
  MathModes m;
  m.tf32_matmul = false;
  m.tf32_cudnn = false;
  m.bf16_reduced_precision_reduction = true;
  m.fp16_reduced_precision_reduction = true;
  m.deterministic_algorithms = false;
  m.cudnn_benchmark = false;
  return m;
}

MathModes merged(const MathModes& base, const MathModes& over) {
  MathModes out = base;
  for (const auto& [name, field] : fields())
    if (over.*field) out.*field = over.*field;
  return out;
}

bool set_math_mode(MathModes& modes, const std::string& name, bool value) {
  for (const auto& [n, field] : fields()) {
    if (n == name) {
      modes.*field = value;
      return true;
    }
  }
  return false;
}

std::vector<std::pair<std::string, std::optional<bool>>> math_mode_fields(const MathModes& modes) {
  std::vector<std::pair<std::string, std::optional<bool>>> out;
  for (const auto& [name, field] : fields()) out.emplace_back(name, modes.*field);
  return out;
}

void parse_math_mode(MathModes& modes, const std::string& assignment) {
  const auto eq = assignment.find('=');
  std::string names;
  for (const auto& n : math_mode_names()) names += (names.empty() ? "" : ", ") + n;
  if (eq == std::string::npos)
    throw std::invalid_argument("--math-mode '" + assignment + "': expected NAME=on|off, NAME one of: " + names);
  const auto name = assignment.substr(0, eq);
  const auto value = assignment.substr(eq + 1);
  bool on = false;
  if (value == "on" || value == "true" || value == "1") {
    on = true;
  } else if (value != "off" && value != "false" && value != "0") {
    throw std::invalid_argument("--math-mode " + name + ": expected on or off, got '" + value + "'");
  }
  if (!set_math_mode(modes, name, on))
    throw std::invalid_argument("--math-mode: unknown mode '" + name + "' (expected one of: " + names + ")");
}

std::string describe_math_modes(const MathModes& modes) {
  std::string out;
  for (const auto& [name, value] : math_mode_fields(modes))
    if (value) out += (out.empty() ? "" : ", ") + name + (*value ? "=on" : "=off");
  return out;
}

}  // namespace kcert::numerics
