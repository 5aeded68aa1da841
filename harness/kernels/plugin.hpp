#pragma once
// Out-of-tree kernel plugins. A plugin is a shared library built against an installed kcert
// (find_package(kcert); target_link_libraries(my_plugin PRIVATE kcert::kcert)) that defines
// two C symbols, most simply with the macros below:
//
//   #include <kcert/plugin.hpp>   // the public header; it includes this one
//   KCERT_PLUGIN("my_kernels", "1.4.0")
//   KCERT_PLUGIN_REGISTER(registry) {
//     registry.add_variant("rmsnorm", {{"my_fused", "", "one-pass fused RMSNorm", params}, fn});
//   }
//
// kcert checks the plugin's ABI version at load, and records the plugin's name and version
// as the kernel version of every variant it registers (docs/plugins.md).
#include <string>

#include "harness/kernels/registry.hpp"

// Bumped whenever a type a plugin sees (Registry, Family, Variant, KernelInputs, Precision,
// ProbeContract, ParamMap) changes layout or meaning.
#define KCERT_PLUGIN_ABI_VERSION 5  // 5: Family::row_separable and Variant::in_row_blocks, 4: Precision's near-tie notes (issue 37); 3: Variant::backward, Family::gradients (issue 31)

namespace kcert::kernels {

struct PluginInfo {
  int abi_version;
  const char* name;
  const char* version;
};

// What load_plugin() found.
struct LoadedPlugin {
  std::string path;
  std::string name;
  std::string version;
  int variants_added = 0;
  int families_added = 0;
};

class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

int plugin_abi_version();

// Loads a plugin into the registry (a path loaded twice is loaded once). Throws PluginError:
// file not found, not a shared library, not a kcert plugin, another ABI version, or a name
// the registry already holds.
LoadedPlugin load_plugin(const std::string& path, Registry& registry);

// Throws PluginError unless the file at `canonical` is a regular file owned by the user
// running kcert (or root), not writable by group or others, in a folder owned by that user
// (or root) that neither its group nor others can write (a sticky world-writable folder
// such as /tmp is fine: only the file's owner may replace a file there). load_plugin opens
// the file once, runs these checks on the open file, and dlopens /proc/self/fd/N, so the
// file checked is the file loaded (dlopen runs the library's code).
void check_plugin_file(const std::string& canonical);

}  // namespace kcert::kernels

#define KCERT_PLUGIN(NAME, VERSION)                                                         \
  extern "C" const kcert::kernels::PluginInfo* kcert_plugin_info() {                        \
    static const kcert::kernels::PluginInfo info{KCERT_PLUGIN_ABI_VERSION, NAME, VERSION}; \
    return &info;                                                                           \
  }

#define KCERT_PLUGIN_REGISTER(REGISTRY) extern "C" void kcert_plugin_register(kcert::kernels::Registry& REGISTRY)
