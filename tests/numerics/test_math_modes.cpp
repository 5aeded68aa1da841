// GPU math modes (docs/gpu.md): parsing, merging, and ATen's global context. The switches are
// plain flags in ATen's context, so they are set and read back on a CPU-only build too.
#include "tests/catch_torch.hpp"

#include "harness/numerics/math_modes.hpp"

using kcert::numerics::MathModes;

TEST_CASE("math-mode assignments NAME=on|off parse, and bad ones name what is allowed", "[math_modes]") {
  MathModes m;
  kcert::numerics::parse_math_mode(m, "tf32_matmul=on");
  kcert::numerics::parse_math_mode(m, "deterministic_algorithms=false");
  CHECK(m.tf32_matmul == true);
  CHECK(m.deterministic_algorithms == false);
  CHECK_FALSE(m.tf32_cudnn.has_value());
  CHECK(kcert::numerics::describe_math_modes(m) == "tf32_matmul=on, deterministic_algorithms=off");
  CHECK_THROWS_WITH(kcert::numerics::parse_math_mode(m, "tf32_matmul"), Catch::Contains("expected NAME=on|off"));
  CHECK_THROWS_WITH(kcert::numerics::parse_math_mode(m, "tf32=on"),
                    Catch::Contains("unknown mode 'tf32' (expected one of: tf32_matmul, tf32_cudnn, "
                                    "bf16_reduced_precision_reduction"));
  CHECK_THROWS_WITH(kcert::numerics::parse_math_mode(m, "tf32_matmul=yes"), Catch::Contains("expected on or off, got 'yes'"));
}

TEST_CASE("a case's modes override the run's field by field", "[math_modes]") {
  MathModes over;
  over.tf32_matmul = true;
  const auto m = kcert::numerics::merged(kcert::numerics::pinned_math_modes(), over);
  CHECK(m.tf32_matmul == true);
  CHECK(m.tf32_cudnn == false);
  CHECK(m.fp16_reduced_precision_reduction == true);
  CHECK(m.cudnn_benchmark == false);
}

TEST_CASE("math modes are written into ATen's context and read back", "[math_modes]") {
  const auto before = kcert::numerics::current_math_modes();
  MathModes m = kcert::numerics::pinned_math_modes();
  m.tf32_matmul = true;
  m.tf32_cudnn = true;
  const auto applied = kcert::numerics::apply_math_modes(m, false);
  CHECK(applied.tf32_matmul == true);
  CHECK(applied.tf32_cudnn == true);
  CHECK(kcert::numerics::current_math_modes().tf32_matmul == true);
  // The pinned values, as a run starts with them.
  const auto pinned = kcert::numerics::apply_math_modes(kcert::numerics::pinned_math_modes(), false);
  CHECK(pinned.tf32_matmul == false);
  CHECK(pinned.tf32_cudnn == false);
  CHECK(pinned.fp16_reduced_precision_reduction == true);
  CHECK(pinned.deterministic_algorithms == false);
#if TORCH_VERSION_MAJOR >= 2
  CHECK(pinned.bf16_reduced_precision_reduction == true);
#else
  // 1.13 has no switch: absent, never claimed; asking for it is an error.
  CHECK_FALSE(pinned.bf16_reduced_precision_reduction.has_value());
  MathModes bf16;
  bf16.bf16_reduced_precision_reduction = false;
  CHECK_THROWS_WITH(kcert::numerics::apply_math_modes(bf16, true), Catch::Contains("needs LibTorch >= 2.0"));
#endif
  kcert::numerics::apply_math_modes(before, false);
}
