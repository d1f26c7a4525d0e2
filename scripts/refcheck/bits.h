// Floats to and from their bits, as the harnesses read and print them (Rust's to_bits /
// from_bits on the other side): the comparisons are exact.
#ifndef QUIVER_REFCHECK_BITS_H
#define QUIVER_REFCHECK_BITS_H

#include <cstdint>
#include <cstring>

namespace refcheck {
  inline uint64_t bits(double x) {
    uint64_t u;
    std::memcpy(&u, &x, sizeof u);
    return u;
  }
  inline uint32_t bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return u;
  }
  inline double f64(uint64_t u) {
    double x;
    std::memcpy(&x, &u, sizeof x);
    return x;
  }
  inline float f32(uint32_t u) {
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
  }
}  // namespace refcheck

#endif
