// MoE combine family: the routed experts' outputs weighted and summed per token, with the
// dispatch structures the controls replay (#8 dense masking vs per-expert loop, #30 sorted
// permute dispatch, #31 padded grouped bmm).
//
// Inputs: x [B, tokens, hidden] (W), the routing of each token — idx [B, tokens, k]
// distinct experts and w [B, tokens, k] fp32 weights summing to 1 — per replicate (drawn,
// not computed, so both sides and the oracle route identically); W_experts
// [experts, hidden_out, hidden] fixed (W). Every expert GEMM is fp32-accumulated and
// rounded to W; the combine accumulates in fp32 and rounds once.
// Output [B, tokens, hidden_out]. Bucket axes: channel (default), row.
#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"

namespace kcert::kernels {

namespace {

using numerics::Precision;

// One replicate's tensors (no batch dimension).
struct Routed {
  torch::Tensor x, idx, w, experts;
};

template <typename Fn>
torch::Tensor per_replicate(const KernelInputs& in, const Precision& p, Fn fn) {
  const auto& x = in.at("x");
  std::vector<torch::Tensor> outs;
  for (int64_t b = 0; b < x.size(0); ++b) {
    outs.push_back(fn(Routed{x[b], in.at("idx")[b], p.up(in.at("w")[b]), in.at("W_experts")}, p));
  }
  return torch::stack(outs);
}

torch::Tensor expert_gemm(const torch::Tensor& rows, const torch::Tensor& w_e, const Precision& p) {
  return p.round_w(torch::matmul(p.up(rows), p.up(w_e).t()));
}

// #8 reference: every expert on every token, a dense (tokens, experts) weight matrix.
torch::Tensor dense_masked(const Routed& r, const Precision& p) {
  const auto e = r.experts.size(0);
  const auto d = torch::zeros({r.x.size(0), e}, r.w.options()).scatter(-1, r.idx, r.w);
  auto acc = torch::zeros({r.x.size(0), r.experts.size(1)}, r.w.options());
  for (int64_t j = 0; j < e; ++j) acc = acc + p.up(expert_gemm(r.x, r.experts[j], p)) * d.select(1, j).unsqueeze(1);
  return p.round_w(acc);
}

// #8 production / #30 and #31 reference: Mixtral's loop, where(idx == e), fp32 index_add_.
torch::Tensor loop_index_add(const Routed& r, const Precision& p) {
  auto acc = torch::zeros({r.x.size(0), r.experts.size(1)}, r.w.options());
  for (int64_t j = 0; j < r.experts.size(0); ++j) {
    const auto hits = torch::nonzero(r.idx == j);  // [n, 2]: token, slot
    if (hits.size(0) == 0) continue;
    const auto tok = hits.select(1, 0), slot = hits.select(1, 1);
    const auto y = expert_gemm(r.x.index_select(0, tok), r.experts[j], p);
    const auto weight = r.w.index({tok, slot}).unsqueeze(1);
    acc.index_add_(0, tok, p.up(y) * weight);
  }
  return p.round_w(acc);
}

// #30: (token, slot) pairs stably sorted by expert, tokens gathered into one permuted
// buffer, segment GEMMs, weights applied in fp32, un-permuted by index_add_.
torch::Tensor sorted_permute(const Routed& r, const Precision& p) {
  const auto k = r.idx.size(1);
  const auto flat = r.idx.reshape({-1});
  const auto order = std::get<1>(at::sort(flat, /*stable=*/true, 0, /*descending=*/false));
  const auto tok = torch::div(order, k, "floor");
  const auto experts_sorted = flat.index_select(0, order);
  const auto weights = r.w.reshape({-1}).index_select(0, order).unsqueeze(1);
  const auto buffer = r.x.index_select(0, tok);
  const auto counts = torch::bincount(experts_sorted, {}, r.experts.size(0));
  auto acc = torch::zeros({r.x.size(0), r.experts.size(1)}, r.w.options());
  int64_t start = 0;
  for (int64_t j = 0; j < r.experts.size(0); ++j) {
    const auto n = counts[j].item<int64_t>();
    if (n == 0) continue;
    const auto y = expert_gemm(buffer.narrow(0, start, n), r.experts[j], p);
    acc.index_add_(0, tok.narrow(0, start, n), p.up(y) * weights.narrow(0, start, n));
    start += n;
  }
  return p.round_w(acc);
}

// #31: each expert's tokens padded to the capacity C, one batched GEMM (E, C, H) x
// (E, H, H_out), padding discarded, the same fp32 combine in expert order.
torch::Tensor padded_bmm(const Routed& r, const Precision& p) {
  const auto e = r.experts.size(0), h = r.x.size(1);
  std::vector<torch::Tensor> toks, slots;
  int64_t capacity = 1;
  for (int64_t j = 0; j < e; ++j) {
    const auto hits = torch::nonzero(r.idx == j);
    toks.push_back(hits.select(1, 0));
    slots.push_back(hits.select(1, 1));
    capacity = std::max<int64_t>(capacity, hits.size(0));
  }
  auto buf = torch::zeros({e, capacity, h}, r.x.options());
  for (int64_t j = 0; j < e; ++j) {
    if (toks[j].size(0) > 0) buf[j].narrow(0, 0, toks[j].size(0)).copy_(r.x.index_select(0, toks[j]));
  }
  const auto y = p.round_w(torch::bmm(p.up(buf), p.up(r.experts).transpose(1, 2)));  // [E, C, H_out]
  auto acc = torch::zeros({r.x.size(0), r.experts.size(1)}, r.w.options());
  for (int64_t j = 0; j < e; ++j) {
    const auto n = toks[j].size(0);
    if (n == 0) continue;
    acc.index_add_(0, toks[j], p.up(y[j].narrow(0, 0, n)) * r.w.index({toks[j], slots[j]}).unsqueeze(1));
  }
  return p.round_w(acc);
}

std::vector<Variant> moe_variants() {
  const auto v = [](std::string name, std::string description, torch::Tensor (*fn)(const Routed&, const Precision&)) {
    return builtin_variant(std::move(name), std::move(description), {},
                           [fn](const KernelInputs& in, const Precision& p, const ParamMap&) {
                             return per_replicate(in, p, fn);
                           });
  };
  std::vector<Variant> out;
  out.push_back(v("dense_masked", "every expert on every token, combined with a dense (tokens, experts) weight matrix (#8 reference)",
                  dense_masked));
  out.push_back(v("loop_index_add_fp32",
                  "Mixtral's per-expert loop: where(idx == e), expert GEMM on the gathered tokens, fp32 index_add_ (#8)",
                  loop_index_add));
  out.push_back(v("sorted_permute_dispatch",
                  "MegaBlocks / vLLM fused-MoE dispatch: stable sort by expert, permuted buffer, segment GEMMs, "
                  "un-permute by fp32 index_add_ (#30)",
                  sorted_permute));
  out.push_back(v("padded_grouped_bmm", "tokens padded to the expert capacity, one batched GEMM, padding discarded (#31)",
                  padded_bmm));
  return out;
}

}  // namespace

void register_moe_combine_family(Registry& registry) {
  Family f;
  f.name = "moe_combine";
  f.description = "MoE expert dispatch and combine: x [tokens, hidden], k routed experts per token, fp32 weights";
  f.bucket_axes = {"channel", "row"};
  f.probe_params = {
      param::integer("shape.tokens", 256).at_least(1).doc("tokens per replicate"),
      param::integer("shape.hidden", 256).at_least(1).doc("expert input width"),
      param::integer("shape.hidden_out", 256).at_least(1).doc("expert output width"),
      param::integer("shape.experts", 16).at_least(2).doc("experts E"),
      param::integer("router.top_k", 2).at_least(1).doc("experts per token k"),
  };
  f.validate_probe = [](const ProbeContract& probe) -> std::optional<FieldError> {
    if (probe.params.integer("router.top_k") > probe.params.integer("shape.experts")) {
      return FieldError{"probe.router.top_k", "expected at most probe.shape.experts"};
    }
    return check_outlier_count(probe, "shape.hidden");
  };
  f.make_fixed = [](const ProbeContract& probe, std::uint64_t seed) {
    InputStream stream(seed);
    const auto e = probe.params.integer("shape.experts"), h = probe.params.integer("shape.hidden"),
               ho = probe.params.integer("shape.hidden_out");
    KernelInputs fixed;
    fixed.set("W_experts", (stream.normal({e, ho, h}) /
                            std::sqrt(static_cast<double>(h)))
                               .to(numerics::to_dtype(probe.dtype)));
    return fixed;
  };
  f.make_replicate = [](const ProbeContract& probe, const KernelInputs&, std::uint64_t seed) {
    auto in = token_channel_activations(probe, "shape.tokens", "shape.hidden", seed);
    InputStream routing(seed ^ 0x6d6f65ULL);  // the routing's own stream
    const auto t = probe.params.integer("shape.tokens"), e = probe.params.integer("shape.experts"),
               k = probe.params.integer("router.top_k");
    // k distinct experts per token (many experts, some empty), softmax weights in fp32.
    in.set("idx", std::get<1>(routing.uniform({t, e}).topk(k, -1)).contiguous());
    in.set("w", torch::softmax(routing.normal({t, k}), -1));
    return in;
  };
  f.bucket_ids = [](const std::string& axis, const ProbeContract&, at::IntArrayRef shape) {
    return token_channel_bucket_ids(axis, shape);
  };
  for (auto& v : moe_variants()) f.variants.emplace(v.schema.name, std::move(v));
  registry.add_family(std::move(f));
}

}  // namespace kcert::kernels
