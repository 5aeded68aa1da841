#define KCERT_SWEEP_ISA generic
#include "harness/numerics/observation_sweep_impl.hpp"
