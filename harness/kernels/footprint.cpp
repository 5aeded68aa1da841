#include "harness/kernels/footprint.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kcert::kernels {

namespace {
// A shape parameter as a double; 0 when the case does not set it and the family has no default.
double dim(const ProbeContract& p, const char* name) {
  return p.params.has(name) ? static_cast<double>(p.params.integer(name)) : 0.0;
}
}  // namespace

std::optional<Footprint> builtin_footprint(const std::string& family, const ProbeContract& p) {
  const double t = dim(p, "shape.tokens");
  Footprint f;
  if (family == "rmsnorm" || family == "layernorm") {
    const double h = dim(p, "shape.hidden");
    f = {t * h, t * h, t * h, h};
  } else if (family == "residual_rmsnorm") {
    const double h = dim(p, "shape.hidden");
    f = {2 * t * h, t * h, 2 * t * h, h};
  } else if (family == "activation") {
    const double c = dim(p, "shape.channels");
    f = {t * c, t * c, t * c, 0};
  } else if (family == "rope") {
    const double x = t * dim(p, "shape.heads") * dim(p, "shape.head_dim");
    f = {x + t, x, 2 * x, 2 * t * dim(p, "shape.head_dim")};
  } else if (family == "linear") {
    const double in = dim(p, "shape.in_features"), out = dim(p, "shape.out_features");
    f = {t * in, t * out, 2 * t * out, in * out};
  } else if (family == "glu") {
    const double h = dim(p, "shape.hidden"), i = dim(p, "shape.intermediate");
    f = {t * h, t * h, 3 * t * i, 3 * h * i};
  } else if (family == "qkv_rope") {
    const double h = dim(p, "shape.hidden");
    const double width = (dim(p, "shape.heads") + 2 * dim(p, "shape.kv_heads")) * dim(p, "shape.head_dim");
    f = {t * h, t * width, 2 * t * width, h * width};
  } else if (family == "loss") {
    const double n = dim(p, "shape.microbatches") * t, v = dim(p, "shape.vocab");
    f = {n * v + n, n, 2 * n * v, 2 * n};
  } else if (family == "router") {
    const double h = dim(p, "shape.hidden"), e = dim(p, "shape.experts");
    f = {t * h, t * e, 3 * t * e, h * e};
  } else if (family == "attention") {
    const double h = dim(p, "shape.heads"), kv = dim(p, "shape.kv_heads"), d = dim(p, "shape.head_dim");
    const double tk = dim(p, "shape.kv_tokens") > 0 ? dim(p, "shape.kv_tokens") : t;
    f = {h * t * d + 2 * kv * tk * d, h * t * d, 2 * h * t * tk, 0};
  } else if (family == "moe_combine") {
    const double h = dim(p, "shape.hidden"), ho = dim(p, "shape.hidden_out"), e = dim(p, "shape.experts");
    const double k = dim(p, "router.top_k");
    f = {t * h + 2 * t * k, t * ho, 2 * t * k * ho, e * h * ho};
  } else {
    return std::nullopt;
  }
  return f;
}

MemoryEstimate estimate_backward_memory(const Footprint& f, int output_bytes, bool selects, double gradient) {
  const double w = output_bytes;
  const double g = gradient > 0 ? gradient : std::max(f.input, f.fixed);
  MemoryEstimate m;
  m.inputs = 20 * f.input;
  m.outputs = (16 + w) * f.output + (2 * (2 * w + 8 * (selects ? 2 : 1)) + 16) * g;
  m.intermediates = 0;  // the graph of one replicate at a time: per_call
  m.per_call = 16 * (f.input + f.work + f.output);
  m.fixed = 16 * f.fixed;
  return m;
}

MemoryEstimate estimate_memory(const Footprint& f, int output_bytes, bool selects) {
  const double w = output_bytes;
  MemoryEstimate m;
  m.inputs = 20 * f.input;
  m.outputs = (2 * w + 8 * (selects ? 2 : 1) + 16) * f.output;
  m.intermediates = 16 * f.work;
  m.fixed = 16 * f.fixed;  // drawn in fp32, kept in W and fp64
  return m;
}

std::string describe_bytes(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  char buf[48];
  if (!std::isfinite(bytes) || bytes >= 1e6) std::snprintf(buf, sizeof buf, "%.3g %s", bytes, units[u]);
  else std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

}  // namespace kcert::kernels
