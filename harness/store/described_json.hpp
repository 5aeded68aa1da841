#pragma once
// The result document's side of the one result description (gates/description.hpp): a
// described struct written as a JSON object of its fields, and read back typed. Numbers that
// are not finite are written as the documents always wrote them (NaN: null, ±inf: "inf" /
// "-inf", store::json_number) and read back as such; verdicts as their words.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "harness/gates/description.hpp"
#include "harness/stats/verdict.hpp"

namespace kcert::store {

nlohmann::json json_number(double v);  // store/json.hpp

namespace detail {

template <class T>
nlohmann::json value_json(const T& v);

struct DescribedWriter {
  nlohmann::json out = nlohmann::json::object();
  template <class... F>
  void operator()(F&&... fields) {
    ((out[fields.name] = value_json(fields.value)), ...);
  }
};

template <class T>
nlohmann::json value_json(const T& v) {
  if constexpr (std::is_same_v<T, double>) {
    return json_number(v);
  } else if constexpr (std::is_same_v<T, stats::Verdict>) {
    return std::string(stats::to_string(v));
  } else if constexpr (gates::is_described_v<T>) {
    DescribedWriter w;
    gates::describe(w, const_cast<T&>(v));  // the writer only reads
    return std::move(w.out);
  } else {
    static_assert(std::is_same_v<T, bool> || std::is_integral_v<T> || std::is_same_v<T, std::string>,
                  "a described field of a type the document does not know yet");
    return v;
  }
}

// What a field of another type is, in words, for the reader's error.
[[noreturn]] inline void wrong_type(const std::string& where, const char* expected, const nlohmann::json& j) {
  throw std::invalid_argument(where + ": expected " + expected + ", found " + std::string(j.type_name()));
}

template <class T>
void read_value(const nlohmann::json& j, T& v, const std::string& where);

struct DescribedReader {
  const nlohmann::json& in;
  const std::string& where;
  template <class... F>
  void operator()(F&&... fields) {
    (read_field(fields.name, fields.value), ...);
  }
  template <class T>
  void read_field(const char* name, T& v) {
    // A field a document of an older kcert does not carry keeps its default.
    if (const auto it = in.find(name); it != in.end()) read_value(*it, v, where + "." + name);
  }
};

template <class T>
void read_value(const nlohmann::json& j, T& v, const std::string& where) {
  if constexpr (std::is_same_v<T, double>) {
    if (j.is_null()) v = std::numeric_limits<double>::quiet_NaN();
    else if (j.is_number()) v = j.get<double>();
    else if (j == "inf") v = std::numeric_limits<double>::infinity();
    else if (j == "-inf") v = -std::numeric_limits<double>::infinity();
    else wrong_type(where, "a number, null, \"inf\" or \"-inf\"", j);
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) wrong_type(where, "true or false", j);
    v = j.get<bool>();
  } else if constexpr (std::is_same_v<T, stats::Verdict>) {
    if (!j.is_string()) wrong_type(where, "a verdict", j);
    const auto word = j.get<std::string>();
    for (const auto candidate : {stats::Verdict::pass, stats::Verdict::inconclusive, stats::Verdict::warn, stats::Verdict::fail}) {
      if (word == stats::to_string(candidate)) {
        v = candidate;
        return;
      }
    }
    throw std::invalid_argument(where + ": '" + word + "' is not a verdict (PASS, INCONCLUSIVE, WARN, FAIL)");
  } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
    // A document parsed from text holds a count as unsigned; one built in memory may hold it signed.
    if (!j.is_number_unsigned() && !(j.is_number_integer() && j.get<std::int64_t>() >= 0))
      wrong_type(where, "a count (an integer >= 0)", j);
    v = j.get<T>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!j.is_number_integer()) wrong_type(where, "an integer", j);
    v = j.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!j.is_string()) wrong_type(where, "a string", j);
    v = j.get<std::string>();
  } else {
    static_assert(gates::is_described_v<T>, "a described field of a type the reader does not know yet");
    if (!j.is_object()) wrong_type(where, "an object", j);
    DescribedReader r{j, where};
    gates::describe(r, v);
  }
}

}  // namespace detail

// A described struct as a document's object (its fields by name).
template <class T>
nlohmann::json described_json(const T& value) {
  return detail::value_json(value);
}

// A described struct read back from a document's object: every field present is read and
// checked; a field absent (a document of an older kcert) keeps the value's default. Throws
// std::invalid_argument naming the field ("results[3].gates.variance.evidence.horizon:
// expected a number, ...") when one is of another type.
template <class T>
T read_described(const nlohmann::json& j, const std::string& where) {
  T value{};
  detail::read_value(j, value, where);
  return value;
}

}  // namespace kcert::store
