#pragma once
// Loads tests/stats/fixtures/stats_reference.json: values computed independently with
// SciPy/NumPy by generate_fixtures.py beside it.
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace kcert::test {

inline const nlohmann::json& stats_reference() {
  static const nlohmann::json doc = [] {
    const std::string path = std::string(KCERT_FIXTURE_DIR) + "/stats_reference.json";
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open fixture " + path);
    return nlohmann::json::parse(in);
  }();
  return doc;
}

}  // namespace kcert::test
