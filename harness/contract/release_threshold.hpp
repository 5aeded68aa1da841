#pragma once
// A case's `expected_on` may name a LibTorch release threshold ("libtorch>=2.11": a kernel
// that changed in a minor release). The loader checks the spelling and the engine compares it
// with the build's LibTorch (numerics::torch_at_least); the parse lives here, free of LibTorch,
// so the loader need not include a LibTorch layer's header (tools/check-layers.py).
#include <optional>
#include <string>
#include <utility>

namespace kcert::contract {

// "libtorch>=2.11" -> {2, 11}; nullopt for anything else (also for leading zeros, "2", "2.1.0").
inline std::optional<std::pair<int, int>> parse_release_threshold(const std::string& condition) {
  const std::string prefix = "libtorch>=";
  if (condition.rfind(prefix, 0) != 0) return std::nullopt;
  const auto v = condition.substr(prefix.size());
  const auto dot = v.find('.');
  if (dot == std::string::npos) return std::nullopt;
  const auto number = [](const std::string& s) -> std::optional<int> {
    if (s.empty() || s.size() > 4 || (s.size() > 1 && s[0] == '0')) return std::nullopt;
    for (char c : s)
      if (c < '0' || c > '9') return std::nullopt;
    return std::stoi(s);
  };
  const auto major = number(v.substr(0, dot));
  const auto minor = number(v.substr(dot + 1));
  if (!major || !minor) return std::nullopt;
  return std::make_pair(*major, *minor);
}

}  // namespace kcert::contract
