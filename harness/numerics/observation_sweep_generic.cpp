// KCERT_SWEEP_LANES: doubles per vector register in this copy (observation_sweep_impl.hpp).
#define KCERT_SWEEP_ISA generic
#define KCERT_SWEEP_LANES 2
#include "harness/numerics/observation_sweep_impl.hpp"
