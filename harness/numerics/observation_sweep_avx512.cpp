#define KCERT_SWEEP_ISA avx512
#include "harness/numerics/observation_sweep_impl.hpp"
