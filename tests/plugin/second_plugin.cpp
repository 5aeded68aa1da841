// A second, ordinary plugin, loaded beside hostile_plugin.cpp: two plugins in one process
// (KCERT_PLUGINS=a.so:b.so) used to load the first one twice (issue 53, item 4).
#include <kcert/plugin.hpp>

using kcert::kernels::KernelInputs;
using kcert::kernels::ParamMap;
using kcert::numerics::Precision;
namespace param = kcert::kernels::param;

KCERT_PLUGIN("second_kernels", "2.0.0")

KCERT_PLUGIN_REGISTER(registry) {
  registry.add_variant(
      "rmsnorm", {{"second_ok", "", "a correct one-pass RMSNorm from a second plugin",
                   {param::number("eps", 1e-6).at_least(0).doc("added to the mean square")}},
                  [](const KernelInputs& in, const Precision& p, const ParamMap& params) {
                    const auto u = p.up(in.at("x"));
                    const auto inv = torch::rsqrt(u.pow(2).mean(-1, /*keepdim=*/true) + params.number("eps"));
                    return p.round_w(u * inv * p.up(in.at("w")));
                  }});
}
