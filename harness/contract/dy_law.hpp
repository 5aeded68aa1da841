#pragma once
// The laws of a backward case's upstream gradient dy (contract::BackwardProbe), named once
// (issue 51): the loader's check, the draw (engine/gradient_pair.cpp), the result document,
// the console and `kcert list` read this table instead of comparing strings in each file, so a
// new law is one enumerator, one row here and its draw.
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace kcert::contract {

enum class DyLaw { shifted, self_correlated, zero_mean, heavy_tailed, loss_shaped };

struct DyLawInfo {
  DyLaw law;
  std::string_view name;  // the YAML's backward.dy.kind and the result's backward.dy.kind
  bool has_shift;         // backward.dy.shift applies (the others draw around zero or around y)
  bool has_margin;        // backward.dy.margin applies
};

inline constexpr std::array<DyLawInfo, 5> kDyLaws = {{
    {DyLaw::shifted, "shifted", true, false},
    {DyLaw::self_correlated, "self_correlated", false, false},
    {DyLaw::zero_mean, "zero_mean", false, false},
    {DyLaw::heavy_tailed, "heavy_tailed", true, false},
    {DyLaw::loss_shaped, "loss_shaped", false, true},
}};

inline const DyLawInfo& dy_law_info(DyLaw law) {
  for (const auto& i : kDyLaws)
    if (i.law == law) return i;
  return kDyLaws.front();  // unreachable: every enumerator has its row
}

inline std::string_view to_string(DyLaw law) { return dy_law_info(law).name; }

inline std::optional<DyLaw> parse_dy_law(std::string_view name) {
  for (const auto& i : kDyLaws)
    if (i.name == name) return i.law;
  return std::nullopt;
}

// "shifted, self_correlated, zero_mean, heavy_tailed or loss_shaped" (sep ", ", last " or ").
inline std::string dy_law_names(std::string_view last_separator = " or ") {
  std::string out;
  for (std::size_t i = 0; i < kDyLaws.size(); ++i) {
    if (i > 0) out += i + 1 == kDyLaws.size() ? std::string(last_separator) : std::string(", ");
    out += kDyLaws[i].name;
  }
  return out;
}

}  // namespace kcert::contract
