#define KCERT_RNG_ISA avx512
#define KCERT_RNG_LANES 16
#include "harness/stats/random_stream_impl.hpp"
