#define KCERT_SWEEP_ISA avx2
#include "harness/numerics/observation_sweep_impl.hpp"
