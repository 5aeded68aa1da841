#include "harness/runner/resources.hpp"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "harness/runner/errors.hpp"
#include "harness/kernels/footprint.hpp"
#include "harness/numerics/precision.hpp"

namespace kcert::runner {

namespace {
// A cgroup memory limit in bytes from one of its files; nullopt for "max" or no file.
std::optional<double> cgroup_limit(const char* path) {
  std::ifstream in(path);
  std::string v;
  if (!(in >> v) || v == "max") return std::nullopt;
  char* end = nullptr;
  const double b = std::strtod(v.c_str(), &end);
  // cgroup v1 reports "no limit" as a huge page-rounded number.
  return (end && *end == '\0' && b > 0 && b < 1e18) ? std::optional<double>(b) : std::nullopt;
}
}  // namespace

double available_memory_bytes() {
  double bytes = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  for (const char* f : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    if (const auto c = cgroup_limit(f)) bytes = std::min(bytes, *c);
  }
  return bytes;
}

double parse_memory_limit(const std::string& text) {
  const auto bad = [&] {
    return UsageError("--memory-limit '" + text +
                      "': expected a size such as 8G, 512MiB, 1.5GB or 4000000000, or a share of memory such as 60%");
  };
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw bad();
  }
  std::string unit;
  for (std::size_t i = pos; i < text.size(); ++i) {
    if (!std::isspace(static_cast<unsigned char>(text[i]))) unit += static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
  }
  double bytes = 0;
  if (unit == "%") bytes = v / 100.0 * available_memory_bytes();
  else if (unit.empty() || unit == "B") bytes = v;
  else if (unit == "K" || unit == "KB" || unit == "KIB") bytes = v * 1024;
  else if (unit == "M" || unit == "MB" || unit == "MIB") bytes = v * 1024 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") bytes = v * 1024 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB") bytes = v * 1024 * 1024 * 1024 * 1024;
  else throw bad();
  if (!std::isfinite(bytes) || bytes <= 0) throw bad();
  return bytes;
}

MemoryLimit resolve_memory_limit(const std::string& flag) {
  if (!flag.empty()) return {parse_memory_limit(flag), "--memory-limit " + flag};
  if (const char* env = std::getenv("KCERT_MEMORY_LIMIT"); env && *env) {
    return {parse_memory_limit(env), std::string("KCERT_MEMORY_LIMIT=") + env};
  }
  return {available_memory_bytes() / 2, "half the available memory"};
}

std::optional<std::string> memory_refusal(const contract::TestCase& tc, const kernels::Registry& registry,
                                          const MemoryLimit& limit) {
  const auto f = kernels::builtin_footprint(tc.family, tc.probe);
  if (!f) return std::nullopt;
  const auto* family = registry.find_family(tc.family);
  const auto format = family && family->output_format ? family->output_format(tc.probe) : tc.probe.dtype;
  const int out_bytes = static_cast<int>(c10::elementSize(numerics::to_dtype(format)));
  const bool backward = tc.direction == contract::Direction::backward;
  const auto m = backward ? kernels::estimate_backward_memory(*f, out_bytes, family && family->selects)
                          : kernels::estimate_memory(*f, out_bytes, family && family->selects);
  const double need = m.at_batch(1);
  if (need <= limit.bytes) return std::nullopt;
  const auto parts = backward ? "inputs " + kernels::describe_bytes(m.inputs) + ", dy and gradients " +
                                    kernels::describe_bytes(m.outputs) + ", one replicate's backward graph " +
                                    kernels::describe_bytes(m.per_call)
                              : "inputs " + kernels::describe_bytes(m.inputs) + ", outputs " + kernels::describe_bytes(m.outputs) +
                                    ", intermediates " + kernels::describe_bytes(m.intermediates);
  return "probe.shape: this case needs about " + kernels::describe_bytes(need) +
         " at one replicate per kernel call" + (backward ? " of its backward" : "") + " (" + parts + ", fixed weights " +
         kernels::describe_bytes(m.fixed) + "), more than the memory limit " +
         kernels::describe_bytes(limit.bytes) + " (" + limit.source +
         "; --memory-limit or KCERT_MEMORY_LIMIT to change it)";
}

}  // namespace kcert::runner
