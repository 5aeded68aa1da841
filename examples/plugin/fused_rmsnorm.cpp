// An example kcert plugin: two "fused" RMSNorm kernels written with LibTorch ops, registered
// as variants of kcert's built-in rmsnorm family.
//
//   fused_rmsnorm          one pass in fp32, weight multiplied in fp32, one rounding at the
//                          end: the TransformerEngine cast points, so it should PASS against
//                          the built-in fused_weight_fp32 reference.
//   fused_rmsnorm_trunc    the same, but the final store truncates (rounds toward zero)
//                          instead of rounding to nearest, as some hand-written kernels do
//                          (ROCm/aiter#5151): a directional bias the bias gate must flag.
//
// A kernel is a pure function of (inputs, Precision): it never names a dtype, so kcert can
// run the same code as the fp64 oracle and in the algebra gate.
#include <kcert/plugin.hpp>

using kcert::kernels::KernelInputs;
using kcert::kernels::ParamMap;
using kcert::kernels::ParamSpec;
namespace param = kcert::kernels::param;
using kcert::numerics::Precision;

KCERT_PLUGIN("fused_rmsnorm_example", "0.3.1")

namespace {

torch::Tensor fused_normalize(const KernelInputs& in, const Precision& p, const ParamMap& params) {
  const auto u = p.up(in.at("x"));  // [batch, tokens, hidden] in the accumulation dtype
  const auto inv = torch::rsqrt(u.pow(2).mean(-1, /*keepdim=*/true) + params.number("eps"));
  return u * inv * p.up(in.at("w"));
}

const std::vector<ParamSpec> kParams = {
    param::number("eps", 1e-6).at_least(0).doc("added to the mean square")};

}  // namespace

KCERT_PLUGIN_REGISTER(registry) {
  registry.add_variant("rmsnorm", {{"fused_rmsnorm", "", "one-pass fused RMSNorm, one rounding (example plugin)", kParams},
                                   [](const KernelInputs& in, const Precision& p, const ParamMap& params) {
                                     return p.round_w(fused_normalize(in, p, params));
                                   }});
  registry.add_variant("rmsnorm",
                       {{"fused_rmsnorm_trunc", "", "fused RMSNorm whose store truncates (deliberate defect)", kParams},
                        [](const KernelInputs& in, const Precision& p, const ParamMap& params) {
                          return p.trunc_w(fused_normalize(in, p, params));
                        }});
}
