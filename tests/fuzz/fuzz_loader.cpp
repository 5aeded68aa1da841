// libFuzzer target for the case loader (-DKCERT_FUZZ=ON, bench/fuzz-loader.sh). The property:
// whatever the bytes, parse_testcase returns a case or throws LoadError (a message with file,
// line, field). Any other exception escapes and libFuzzer reports it as a crash, as it does
// for a sanitizer report: the "internal error ... bad conversion" class of bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/kernels/registry.hpp"
#include "harness/testcase/loader.hpp"

namespace {
const kcert::testcase::FamilySchemas& schemas() {
  static const auto s = [] {
    kcert::kernels::Registry registry;
    kcert::kernels::register_builtin_families(registry);
    kcert::testcase::FamilySchemas out;
    for (const auto& name : registry.family_names()) out.emplace(name, registry.family(name).schema());
    return out;
  }();
  return s;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const char* profile : {"", "smoke"}) {
    try {
      (void)kcert::testcase::parse_testcase(text, "fuzz.yaml", schemas(), profile);
    } catch (const kcert::testcase::LoadError&) {
      // the expected outcome for bad input
    }
  }
  return 0;
}
