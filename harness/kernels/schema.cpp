#include "harness/kernels/schema.hpp"

#include <sstream>
#include <stdexcept>

namespace kcert::kernels {

std::string_view describe(ParamType t) {
  switch (t) {
    case ParamType::integer: return "an integer";
    case ParamType::number: return "a number";
    case ParamType::boolean: return "true or false";
    case ParamType::string: return "a string";
    case ParamType::number_list: return "a list of numbers";
  }
  return "?";
}

std::string format_value(const ParamValue& v) {
  std::ostringstream os;
  std::visit(
      [&os](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          os << (x ? "true" : "false");
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          os << "[";
          for (std::size_t i = 0; i < x.size(); ++i) os << (i ? ", " : "") << x[i];
          os << "]";
        } else {
          os << x;
        }
      },
      v);
  return os.str();
}

const ParamValue& ParamMap::get(const std::string& name) const {
  const auto it = values_.find(name);
  if (it == values_.end()) throw std::out_of_range("parameter '" + name + "' is not set");
  return it->second;
}

std::int64_t ParamMap::integer(const std::string& name) const {
  const auto& v = get(name);
  if (const auto* i = std::get_if<std::int64_t>(&v)) return *i;
  throw std::out_of_range("parameter '" + name + "' is not an integer");
}

double ParamMap::number(const std::string& name) const {
  const auto& v = get(name);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* i = std::get_if<std::int64_t>(&v)) return static_cast<double>(*i);
  throw std::out_of_range("parameter '" + name + "' is not a number");
}

bool ParamMap::boolean(const std::string& name) const {
  const auto& v = get(name);
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  throw std::out_of_range("parameter '" + name + "' is not a boolean");
}

const std::string& ParamMap::string(const std::string& name) const {
  const auto& v = get(name);
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  throw std::out_of_range("parameter '" + name + "' is not a string");
}

const std::vector<double>& ParamMap::number_list(const std::string& name) const {
  const auto& v = get(name);
  if (const auto* l = std::get_if<std::vector<double>>(&v)) return *l;
  throw std::out_of_range("parameter '" + name + "' is not a list of numbers");
}

}  // namespace kcert::kernels
