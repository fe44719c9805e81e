/* The scalar functions of cncc's libdevice (libdevice.compute_20/30/35.bc: `__cn_scalar_<op>_<type>`), which
 * code generators and some lab answers call from device code. Scalar ALU work: plain C math here, charged like
 * any other scalar code. `_rn` forms round to nearest, as IEEE float arithmetic does. */
#ifndef BANG_EMU_LIBDEVICE_H_
#define BANG_EMU_LIBDEVICE_H_

#include <math.h>
#include <stdint.h>

#define BANG_EMU_CN_UNARY(op, expr) \
  inline float __cn_scalar_##op##_f32(float x) { return (expr); }
#define BANG_EMU_CN_BINARY(op, expr) \
  inline float __cn_scalar_##op##_f32(float x, float y) { return (expr); }

BANG_EMU_CN_UNARY(sin, sinf(x))
BANG_EMU_CN_UNARY(cos, cosf(x))
BANG_EMU_CN_UNARY(tan, tanf(x))
BANG_EMU_CN_UNARY(sinh, sinhf(x))
BANG_EMU_CN_UNARY(cosh, coshf(x))
BANG_EMU_CN_UNARY(tanh, tanhf(x))
BANG_EMU_CN_UNARY(asin, asinf(x))
BANG_EMU_CN_UNARY(acos, acosf(x))
BANG_EMU_CN_UNARY(atan, atanf(x))
BANG_EMU_CN_UNARY(ceil, ceilf(x))
BANG_EMU_CN_UNARY(round, roundf(x))
BANG_EMU_CN_UNARY(trunc, truncf(x))
BANG_EMU_CN_UNARY(abs, fabsf(x))
BANG_EMU_CN_UNARY(sign, (float)((x > 0.0f) - (x < 0.0f)))
BANG_EMU_CN_UNARY(floor, floorf(x))
BANG_EMU_CN_UNARY(log, logf(x))
BANG_EMU_CN_UNARY(log1p, log1pf(x))
BANG_EMU_CN_UNARY(log2, log2f(x))
BANG_EMU_CN_UNARY(log10, log10f(x))
BANG_EMU_CN_UNARY(exp, expf(x))
BANG_EMU_CN_UNARY(erf, erff(x))
BANG_EMU_CN_UNARY(sqrt, sqrtf(x))
BANG_EMU_CN_UNARY(rsqrt, 1.0f / sqrtf(x))
BANG_EMU_CN_BINARY(mod, fmodf(x, y))
BANG_EMU_CN_BINARY(pow, powf(x, y))
BANG_EMU_CN_BINARY(max, fmaxf(x, y))
BANG_EMU_CN_BINARY(min, fminf(x, y))
#undef BANG_EMU_CN_UNARY
#undef BANG_EMU_CN_BINARY

inline float __cn_scalar_add_f32_rn(float x, float y) { return x + y; }
inline float __cn_scalar_sub_f32_rn(float x, float y) { return x - y; }
inline float __cn_scalar_mul_f32_rn(float x, float y) { return x * y; }
inline float __cn_scalar_div_f32_rn(float x, float y) { return x / y; }
inline int __cn_scalar_isinf_f32(float x) { return isinf(x) ? 1 : 0; }
inline int __cn_scalar_isnan_f32(float x) { return isnan(x) ? 1 : 0; }
inline half __cn_scalar_max_f16(half x, half y) { return x < y ? y : x; }
inline half __cn_scalar_min_f16(half x, half y) { return y < x ? y : x; }
inline uint32_t __cn_scalar_max_u32(uint32_t x, uint32_t y) { return x < y ? y : x; }
inline uint32_t __cn_scalar_min_u32(uint32_t x, uint32_t y) { return y < x ? y : x; }
inline int32_t __cn_scalar_max_s32(int32_t x, int32_t y) { return x < y ? y : x; }
inline int32_t __cn_scalar_min_s32(int32_t x, int32_t y) { return y < x ? y : x; }

/* scalar conversions (cncc 5 __clang_bang_math.h: __float2half_tz ... __half2short_dn; 3xx adds _rn), rounded by
 * the mode their suffix names (rounding.h, the same code as the vector __bang_float2half_* forms) */
#define BANG_EMU_SCALAR_CVT(mode)                                                                               \
  inline half __float2half_##mode(float x) { return ::bang_emu::round_to<::bang_emu::HalfFmt>(x, ::bang_emu::round_##mode); } \
  inline bfloat16_t __float2bfloat16_##mode(float x) {                                                        \
    return ::bang_emu::round_to<::bang_emu::Bf16Fmt>(x, ::bang_emu::round_##mode);                            \
  }                                                                                                           \
  inline int __float2int_##mode(float x) { return ::bang_emu::round_int<int>(x, ::bang_emu::round_##mode); }  \
  inline int __half2int_##mode(half x) { return ::bang_emu::round_int<int>((float)x, ::bang_emu::round_##mode); } \
  inline short __float2short_##mode(float x) { return ::bang_emu::round_int<short>(x, ::bang_emu::round_##mode); } \
  inline short __half2short_##mode(half x) { return ::bang_emu::round_int<short>((float)x, ::bang_emu::round_##mode); } \
  inline int __float2int32_##mode(float x) { return ::bang_emu::round_int<int>(x, ::bang_emu::round_##mode); }
BANG_EMU_ROUNDINGS(BANG_EMU_SCALAR_CVT)
#undef BANG_EMU_SCALAR_CVT
inline float __half2float(half x) { return (float)x; }
inline float __bfloat162float(bfloat16_t x) { return (float)x; }
inline half __float2half(float x) { return (half)x; }
inline int __float2int32(float x) { return ::bang_emu::round_int<int>(x, ::bang_emu::round_tz); }  // as a C cast

#endif /* BANG_EMU_LIBDEVICE_H_ */
