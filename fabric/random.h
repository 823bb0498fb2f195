// fabric/random.h — unguessable random numbers (region keys, nonces, incarnations).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tierce::fabric {

// From the kernel's CSPRNG (getrandom). Throws FabricError on failure; never falls back to a
// guessable source.
void random_bytes(void* dst, size_t len);
uint64_t random_u64();

}  // namespace tierce::fabric
