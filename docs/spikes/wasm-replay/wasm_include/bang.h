/* bang.h, wasm flavour (spike). Device code compiled by clang-19 for wasm32; every builtin, the task
 * variables and the on-chip allocator are *imports* from module "bang": host functions outside linear memory.
 * Pointers are 32-bit offsets into the instance's linear memory; the host bounds-checks every operand. */
#ifndef BANG_WASM_BANG_H_
#define BANG_WASM_BANG_H_
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <string.h>
#ifdef __cplusplus
#include <cmath>
#include <type_traits>
#endif
#include "cnrt.h"   /* host API types only (cnrtQueue_t, cnrtDim3_t): the host entries compile but never run */

#define __mlu_const__
#define __nram__
#define __wram__
#define __mlu_shared__
#define __mlu_global__
#define __mlu_entry__
#define __mlu_func__ inline
#define __mlu_vector__ inline
#define __mlu_device__
#define __mlu_host__
#define __BANG__ 1
#define __MLU__ 1

/* clang-19 has no _Float16 on wasm32 ("not supported on this target"), and __fp16 cannot be a parameter or
 * return type. g++ 12 on x86-64 rounds _Float16 arithmetic to half after every operation, so a class that
 * computes each operation in float and rounds its result reproduces it (conversions in compiler-rt). */
#ifdef __cplusplus
extern "C" float __extendhfsf2(unsigned short);   /* compiler-rt (libclang_rt.builtins-wasm32) */
extern "C" unsigned short __truncsfhf2(float);
struct half {
  unsigned short bits;
  half() = default;
  constexpr half(unsigned short b, int) : bits(b) {}
  half(float f) : bits(__truncsfhf2(f)) {}
  half(double f) : bits(__truncsfhf2((float)f)) {}
  half(int i) : bits(__truncsfhf2((float)i)) {}
  operator float() const { return __extendhfsf2(bits); }
  half &operator+=(half o) { return *this = half(float(*this) + float(o)); }
  half &operator-=(half o) { return *this = half(float(*this) - float(o)); }
  half &operator*=(half o) { return *this = half(float(*this) * float(o)); }
  half &operator/=(half o) { return *this = half(float(*this) / float(o)); }
};
inline half operator+(half a, half b) { return half(float(a) + float(b)); }
inline half operator-(half a, half b) { return half(float(a) - float(b)); }
inline half operator*(half a, half b) { return half(float(a) * float(b)); }
inline half operator/(half a, half b) { return half(float(a) / float(b)); }
#else
typedef unsigned short half;
#endif
typedef enum { GDRAM2NRAM = 0, NRAM2GDRAM, LDRAM2NRAM, NRAM2LDRAM, GDRAM2WRAM, WRAM2GDRAM, LDRAM2WRAM, WRAM2LDRAM,
  NRAM2NRAM, NRAM2WRAM, WRAM2NRAM, GDRAM2SRAM, SRAM2GDRAM, LDRAM2SRAM, SRAM2LDRAM, SRAM2NRAM, NRAM2SRAM,
  SRAM2WRAM, WRAM2SRAM, SRAM2SRAM, GDRAM2GDRAM, GDRAM2LDRAM, LDRAM2GDRAM, LDRAM2LDRAM } mluMemcpyDirection_t;

#define BANG_IMPORT(n) __attribute__((import_module("bang"), import_name(n)))
#ifdef __cplusplus
extern "C" {
#endif
BANG_IMPORT("task_var") int __bang_task_var(int which);
BANG_IMPORT("onchip_alloc") void *__bang_onchip_alloc(int space, unsigned bytes, int index);
BANG_IMPORT("memcpy") void __bang_memcpy_imp(void *dst, const void *src, int size, int dir, int async);
BANG_IMPORT("memcpy_strided") void __bang_memcpy_strided_imp(void *dst, const void *src, int size, int dir,
                                                            int ds, int ss, int seg, int async);
BANG_IMPORT("sync") void __bang_sync_imp(int which);  /* 0 __sync_io/compute, 1 __sync_cluster, 2 __sync_all */
BANG_IMPORT("active_sigmoid_f32") void __bang_active_sigmoid_f32(float *d, const float *s, int n);
BANG_IMPORT("mul_scalar_f32") void __bang_mul_scalar_f32(float *d, const float *s, float v, int n);
BANG_IMPORT("add_f32") void __bang_add_f32(float *d, const float *a, const float *b, int n);
BANG_IMPORT("matmul_f32") void __bang_matmul_f32(float *d, const float *l, const float *r, int M, int K, int N);
BANG_IMPORT("matmul_f16") void __bang_matmul_f16(float *d, const half *l, const half *r, int M, int K, int N);
BANG_IMPORT("transpose") void __bang_transpose_imp(void *d, const void *s, int h, int w, int esize);
BANG_IMPORT("write_zero") void __bang_write_zero_imp(void *d, int bytes);
BANG_IMPORT("memcpy_strided2") void __bang_memcpy_strided2_imp(void *dst, const void *src, int size, int dir,
    int ds0, int ss0, int seg0, int ds1, int ss1, int seg1, int async);
BANG_IMPORT("printf_i") void __bang_printf_i(const char *fmt, long long v);
#ifdef __cplusplus
}
#endif

/* task variables: read from the host at each use (host owns them; a kernel can't change what another core sees) */
#define taskIdX (__bang_task_var(0))
#define taskIdY (__bang_task_var(1))
#define taskIdZ (__bang_task_var(2))
#define taskDimX (__bang_task_var(3))
#define taskDimY (__bang_task_var(4))
#define taskDimZ (__bang_task_var(5))
#define taskId (__bang_task_var(6))
#define taskDim (__bang_task_var(7))
#define coreId (__bang_task_var(8))
#define coreDim (__bang_task_var(9))
#define clusterId (__bang_task_var(10))
#define clusterDim (__bang_task_var(11))

#ifdef __cplusplus
inline void __memcpy(void *d, const void *s, int n, mluMemcpyDirection_t dir) { __bang_memcpy_imp(d, s, n, dir, 0); }
inline void __memcpy(void *d, const void *s, int n, mluMemcpyDirection_t dir, int ds, int ss, int seg) {
  __bang_memcpy_strided_imp(d, s, n, dir, ds, ss, seg, 0);
}
inline void __memcpy_async(void *d, const void *s, int n, mluMemcpyDirection_t dir, int ds, int ss, int seg) {
  __bang_memcpy_strided_imp(d, s, n, dir, ds, ss, seg, 1);
}
inline void __memcpy(void *d, const void *s, int n, mluMemcpyDirection_t dir, int ds0, int ss0, int seg0, int ds1, int ss1, int seg1) {
  __bang_memcpy_strided2_imp(d, s, n, dir, ds0, ss0, seg0, ds1, ss1, seg1, 0);
}
inline void __memcpy_async(void *d, const void *s, int n, mluMemcpyDirection_t dir, int ds0, int ss0, int seg0, int ds1, int ss1, int seg1) {
  __bang_memcpy_strided2_imp(d, s, n, dir, ds0, ss0, seg0, ds1, ss1, seg1, 1);
}
template <class T> inline void __bang_write_zero(T *d, int n) { __bang_write_zero_imp(d, n * (int)sizeof(T)); }
template <class T> inline void __bang_transpose(T *d, const T *s, int h, int w) { __bang_transpose_imp(d, s, h, w, sizeof(T)); }
inline void __bang_matmul(float *d, const float *l, const float *r, int M, int K, int N) { __bang_matmul_f32(d, l, r, M, K, N); }
inline void __bang_matmul(float *d, const half *l, const half *r, int M, int K, int N) { __bang_matmul_f16(d, l, r, M, K, N); }
inline void __memcpy_async(void *d, const void *s, int n, mluMemcpyDirection_t dir) { __bang_memcpy_imp(d, s, n, dir, 1); }
inline void __sync_io() { __bang_sync_imp(0); }
inline void __sync_compute() { __bang_sync_imp(0); }
inline void __sync() { __bang_sync_imp(0); }
inline void __sync_cluster() { __bang_sync_imp(1); }
inline void __sync_all() { __bang_sync_imp(2); }
inline void __bang_active_sigmoid(float *d, const float *s, int n) { __bang_active_sigmoid_f32(d, s, n); }
inline void __bang_mul_scalar(float *d, const float *s, float v, int n) { __bang_mul_scalar_f32(d, s, v, n); }
inline void __bang_add(float *d, const float *a, const float *b, int n) { __bang_add_f32(d, a, b, n); }
/* half forms would be *_f16 imports; not needed by the spike */
inline void __bang_active_sigmoid(half *, const half *, int) { __builtin_trap(); }
inline void __bang_float2half_rn(half *, const float *, int) { __builtin_trap(); }
template <class A, class B> inline auto min(A a, B b) { return b < a ? b : a; }
template <class A, class B> inline auto max(A a, B b) { return a < b ? b : a; }
#endif
#endif
