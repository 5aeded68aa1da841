// A plugin that registers a family of its own: the built-in rmsnorm family copied under the
// name plugin_rmsnorm (its inputs, buckets, backward and C++ variants). A Python variant may
// join a plugin's family (issue 33): tests/python/test_python_variants.py runs one, in process
// and in a spawned worker.
#include <kcert/plugin.hpp>

KCERT_PLUGIN("family_kernels", "1.0.0")

KCERT_PLUGIN_REGISTER(registry) {
  auto family = registry.family("rmsnorm");
  family.name = "plugin_rmsnorm";
  registry.add_family(std::move(family));
}
