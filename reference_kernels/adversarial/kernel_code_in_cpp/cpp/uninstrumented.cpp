// Adversarial fixture kernel_code_in_cpp: host-compiled, so none of these stores is seen by the emulator.
#include <cmath>
#include <cstdint>

void uninstrumented_sigmoid(const void* x, void* y, int64_t count, bool is_half) {
  if (is_half) {
    auto* src = static_cast<const _Float16*>(x);
    auto* dst = static_cast<_Float16*>(y);
    for (int64_t i = 0; i < count; ++i) dst[i] = (_Float16)(1.0f / (1.0f + std::exp(-(float)src[i])));
  } else {
    auto* src = static_cast<const float*>(x);
    auto* dst = static_cast<float*>(y);
    for (int64_t i = 0; i < count; ++i) dst[i] = 1.0f / (1.0f + std::exp(-src[i]));
  }
}
