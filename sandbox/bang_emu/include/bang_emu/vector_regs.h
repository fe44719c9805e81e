/* Vector registers (`vv_float`, `vv_uint32`, ...) and the `__vv_*` functions of `__mlu_vector__` code.
 *
 * No Cambricon document describing them was available (research/bang-reference.md); everything below is read off
 * the one body of code that uses them, mlu-ops (kernels/utils/common.h, kernels/utils/philox_generator.h):
 *  - a register is 256 bytes: `__mluop_arange_vv_` fills its 2048-byte `GuGenSize` with 8 registers of
 *    `__vv_get_length() / sizeof(T)` elements, and the Philox generator stores 64 `uint32_t` per register;
 *  - `__vv_index(v, start, step)` is `v[i] = start + i * step` (arange), `__vv_move(v, x)` broadcasts a scalar or
 *    copies a register, `__vv_add` adds a register or a scalar lane by lane;
 *  - `__vv_mul` / `__vv_mulh` are the low / high 32 bits of the 64-bit product (Philox-4x32's mulhilo, which
 *    the generator computes with them), `__vv_xor`, `__vv_trixor(d, a, b, c) = a ^ b ^ c` (it replaces two
 *    `__vv_xor` on `__BANG_ARCH__ > 520`);
 *  - `__vv_store(dst, v[, n])` writes the first `n` lanes (all by default) to NRAM.
 * Registers are values on the emulated core's stack; `__vv_store` writes through checked scalar stores, so its
 * cost is modelled as scalar NRAM stores (an over-estimate: the hardware stores a register at once). */
#ifndef BANG_EMU_VECTOR_REGS_H_
#define BANG_EMU_VECTOR_REGS_H_

#include <stdint.h>

#include <type_traits>

namespace bang_emu {
constexpr unsigned kVectorRegisterBytes = 256;

template <typename T>
struct vreg {
  static constexpr unsigned lanes = kVectorRegisterBytes / sizeof(T);
  T v[lanes];
};

// integer lanes multiply in twice their width (mul keeps the low half, mulh the high half)
template <typename T>
using wide_t = typename std::conditional<
    std::is_integral<T>::value, typename std::conditional<(sizeof(T) <= 2), uint32_t, uint64_t>::type, T>::type;
}  // namespace bang_emu

typedef bang_emu::vreg<float> vv_float;
typedef bang_emu::vreg<half> vv_half;
typedef bang_emu::vreg<int32_t> vv_int32;
typedef bang_emu::vreg<uint32_t> vv_uint32;
typedef bang_emu::vreg<int16_t> vv_int16;
typedef bang_emu::vreg<uint16_t> vv_uint16;

static inline unsigned __vv_get_length() { return bang_emu::kVectorRegisterBytes; }

template <typename T, typename S>
inline void __vv_index(bang_emu::vreg<T> &d, S start, S step) {
  for (unsigned i = 0; i < d.lanes; i++) d.v[i] = (T)(start + (S)i * step);
}

template <typename T>
inline void __vv_move(bang_emu::vreg<T> &d, const bang_emu::vreg<T> &a) {
  d = a;
}
template <typename T, typename S, typename = typename std::enable_if<std::is_arithmetic<S>::value ||
                                                                     std::is_same<S, half>::value>::type>
inline void __vv_move(bang_emu::vreg<T> &d, S x) {
  for (unsigned i = 0; i < d.lanes; i++) d.v[i] = (T)x;
}

#define BANG_EMU_VV_BINARY(NAME, EXPR)                                                                         \
  template <typename T>                                                                                       \
  inline void NAME(bang_emu::vreg<T> &d, const bang_emu::vreg<T> &a, const bang_emu::vreg<T> &b) {             \
    for (unsigned i = 0; i < d.lanes; i++) {                                                                  \
      T x = a.v[i], y = b.v[i];                                                                               \
      d.v[i] = (T)(EXPR);                                                                                     \
    }                                                                                                         \
  }                                                                                                           \
  template <typename T, typename S, typename = typename std::enable_if<std::is_arithmetic<S>::value ||         \
                                                                       std::is_same<S, half>::value>::type>    \
  inline void NAME(bang_emu::vreg<T> &d, const bang_emu::vreg<T> &a, S s) {                                   \
    for (unsigned i = 0; i < d.lanes; i++) {                                                                  \
      T x = a.v[i], y = (T)s;                                                                                 \
      d.v[i] = (T)(EXPR);                                                                                     \
    }                                                                                                         \
  }

BANG_EMU_VV_BINARY(__vv_add, x + y)
BANG_EMU_VV_BINARY(__vv_sub, x - y)
BANG_EMU_VV_BINARY(__vv_mul, (bang_emu::wide_t<T>)x * (bang_emu::wide_t<T>)y)
BANG_EMU_VV_BINARY(__vv_mulh, ((bang_emu::wide_t<T>)x * (bang_emu::wide_t<T>)y) >> (8 * sizeof(T)))
BANG_EMU_VV_BINARY(__vv_xor, x ^ y)
#undef BANG_EMU_VV_BINARY

template <typename T>
inline void __vv_trixor(bang_emu::vreg<T> &d, const bang_emu::vreg<T> &a, const bang_emu::vreg<T> &b,
                        const bang_emu::vreg<T> &c) {
  for (unsigned i = 0; i < d.lanes; i++) d.v[i] = a.v[i] ^ b.v[i] ^ c.v[i];
}

template <typename T>
inline void __vv_store(T *dst, const bang_emu::vreg<T> &a, unsigned n = bang_emu::vreg<T>::lanes) {
  for (unsigned i = 0; i < n && i < a.lanes; i++) dst[i] = a.v[i];
}

#endif /* BANG_EMU_VECTOR_REGS_H_ */
