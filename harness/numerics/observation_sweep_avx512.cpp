// KCERT_SWEEP_LANES: doubles per vector register in this copy (observation_sweep_impl.hpp).
#define KCERT_SWEEP_ISA avx512
#define KCERT_SWEEP_LANES 8
#include "harness/numerics/observation_sweep_impl.hpp"
