#pragma once
// kcert's public plugin API: the one header an out-of-tree kernel plugin includes.
//
//   #include <kcert/plugin.hpp>
//   KCERT_PLUGIN("my_kernels", "1.4.0")
//   KCERT_PLUGIN_REGISTER(registry) {
//     using namespace kcert::kernels;
//     registry.add_variant("rmsnorm", {{"my_fused", "", "one-pass fused RMSNorm",
//                                       {param::number("eps", 1e-6).at_least(0).doc("added to the mean square")}},
//                                      my_fused_fn});
//   }
//
// It brings the registry (families, variants, KernelInputs, the Precision policy, parameter
// declarations), the probe helpers (seeded generators, the shifted-Gaussian activations)
// and the plugin macros. The headers it includes are installed under
// <prefix>/include/kcert/internal and are not an interface of their own: their paths follow
// kcert's source layout and may move between releases; this one does not (docs/plugins.md).
#include "harness/kernels/plugin.hpp"
#include "harness/kernels/probe.hpp"
