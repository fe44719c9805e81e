/* bang.h, wasm flavour (bang_emu/wasm, issue 37). Device code compiled by clang-19 for wasm32: every builtin, the
 * task variables and the on-chip allocator are *imports* of module "bang", host functions outside the kernel's
 * linear memory. Pointers are 32-bit offsets into that memory; the host checks every operand range.
 *
 * Each import is declared once, with BANG_IMPORT("name"): the import check (imports.py) takes its allow-list and
 * the signature of each name from a probe module built from this header, so this file is the one list.
 *
 * Covered (a start): what the reference kernels' sigmoid and matmul stages use -- __memcpy/__memcpy_async (plain,
 * strided, two-level strided), __sync_io/_compute/_cluster/_all and __sync, task variables, __is_ipu/__is_mpu,
 * __bang_write_zero, __bang_add, __bang_active_sigmoid (float, half), __bang_float2half_rn, __bang_matmul
 * (float and half operands, float result), __bang_transpose, and the `half` type. Not yet: the rest of
 * device.h/libdevice.h/vector_regs.h, bfloat16_t, printf. (Since then: every builtin of device.h through
 * bang_builtins.h, printf, on-chip arrays at file scope and initialised ones, struct arguments; DESIGN.md.) */
#ifndef BANG_WASM_BANG_H_
#define BANG_WASM_BANG_H_
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
#include <type_traits>
#include <tuple>
#include <utility>
#endif
#include "cnrt.h" /* host API types (cnrtQueue_t, cnrtDim3_t): host entries compile, the link drops them */

/* __BANG__, __MLU__ and the architecture's macros come from the compile line (build.py), as cncc predefines them */
#define __mlu_const__
#ifdef BANG_WASM_REWRITE
/* preprocessing for the rewriter (bang_emu.rewrite, as cncc-emu does): the keywords stay. Kernels are kept and
 * exported under their (mangled) names: device code is compiled -fvisibility=hidden and linked --export-dynamic,
 * so they are the module's only function exports. */
#define __nram__ __nram__
#define __wram__ __wram__
#define __mlu_shared__ __mlu_shared__
#define __mlu_global__ __mlu_global__ __attribute__((used, noinline, visibility("default")))
#define __mlu_entry__ __mlu_entry__ __attribute__((used, noinline, visibility("default")))
#define __mlu_func__ __mlu_func__
#define __mlu_vector__ __mlu_vector__
#define __mlu_device__ __mlu_device__
#define __mlu_host__ __mlu_host__
#else
#define __nram__
#define __wram__
#define __mlu_shared__
#define __mlu_global__ __attribute__((used, noinline, visibility("default")))
#define __mlu_entry__ __attribute__((used, noinline, visibility("default")))
#define __mlu_func__ inline
#define __mlu_vector__ inline
#define __mlu_device__
#define __mlu_host__
#endif

/* clang-19 has no _Float16 on wasm32 ("not supported on this target") and __fp16 cannot be a parameter or return
 * type. g++ 12 on x86-64 rounds _Float16 arithmetic to half after every operation, so a class that computes each
 * operation in float and rounds its result reproduces it (conversions from compiler-rt). */
#ifdef __cplusplus
extern "C" float __extendhfsf2(unsigned short);
extern "C" unsigned short __truncsfhf2(float);
struct half {
  unsigned short bits;
  half() = default;
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
/* with another arithmetic type, as g++ converts for _Float16: an integer becomes half (`1 / (half)n` is half), a
 * float or double wins (`h * 0.5f` is float) */
template <class T>
using __bang_half_int = typename std::enable_if<std::is_integral<T>::value, half>::type;
template <class T>
using __bang_half_float = typename std::enable_if<std::is_floating_point<T>::value, T>::type;
#define BANG_WASM_HALF_MIXED(op)                                                                                   \
  template <class T>                                                                                             \
  inline __bang_half_int<T> operator op(half a, T b) { return half(float(a) op float(half(b))); }                 \
  template <class T>                                                                                             \
  inline __bang_half_int<T> operator op(T a, half b) { return half(float(half(a)) op float(b)); }                 \
  template <class T>                                                                                             \
  inline __bang_half_float<T> operator op(half a, T b) { return T(a) op b; }                                      \
  template <class T>                                                                                             \
  inline __bang_half_float<T> operator op(T a, half b) { return a op T(b); }
BANG_WASM_HALF_MIXED(+)
BANG_WASM_HALF_MIXED(-)
BANG_WASM_HALF_MIXED(*)
BANG_WASM_HALF_MIXED(/)
#undef BANG_WASM_HALF_MIXED
#else
typedef unsigned short half;
#endif

/* the native header's types (bfloat16_t, copy directions, fusion operations): one definition for both flavours */
#include "../../include/bang_emu/device_types.h"

#define BANG_IMPORT(name) __attribute__((import_module("bang"), import_name(name)))
#ifdef __cplusplus
extern "C" {
#endif
BANG_IMPORT("task_var") int __bang_wasm_task_var(int which);
/* the on-chip array `tag` (its "name@file:line", as the native rewriter names it) of this core or cluster */
BANG_IMPORT("onchip_alloc") void *__bang_wasm_onchip_alloc(int space, size_t bytes, const char *tag);
/* an initialised on-chip array's first use by this thread (1, else 0): its initial values are copied then only,
 * as natively, where the array is a thread_local reference initialised once per thread (so once per core) */
BANG_IMPORT("onchip_first_use") int __bang_wasm_onchip_first_use(const void *array);
/* launches (sites, below): a journal address as an offset into a journaled buffer (trap otherwise), an x86-64 long
 * narrowed to wasm32's (trap if it does not fit), and the kernel's start (the counters restart) */
BANG_IMPORT("launch_pointer") void *__bang_wasm_launch_pointer(unsigned long long address, int index);
BANG_IMPORT("launch_long") long __bang_wasm_launch_long(long long value, int is_signed, int index);
/* a pointer member of a struct argument (torch_mlu's AddressList: its unused slots hold whatever the host's stack
 * held): a journaled buffer's offset as above, null stays null, any other address an offset past the memory's end,
 * where every access traps */
BANG_IMPORT("launch_member_pointer") void *__bang_wasm_launch_member_pointer(unsigned long long address, int index);
BANG_IMPORT("launch_begin") void __bang_wasm_launch_begin(void);
/* not called by any code here: the counting pass (counting.py) calls it before every scalar store into GDRAM, so
 * the host marks the bytes a kernel wrote; bang_keep_site keeps it through the link */
BANG_IMPORT("scalar_store_gdram") void __bang_wasm_scalar_store_gdram(void *address, int bytes);
/* printf: the format and a wasm32 va_list (the address of the arguments), formatted by the host (device_stdio.c) */
BANG_IMPORT("vprintf") int __bang_wasm_vprintf(const char *format, const void *args);
#ifdef __cplusplus
}
#endif

/* task variables: the host owns them (a kernel cannot change what another core sees) */
#define taskIdX (__bang_wasm_task_var(0))
#define taskIdY (__bang_wasm_task_var(1))
#define taskIdZ (__bang_wasm_task_var(2))
#define taskDimX (__bang_wasm_task_var(3))
#define taskDimY (__bang_wasm_task_var(4))
#define taskDimZ (__bang_wasm_task_var(5))
#define taskId (__bang_wasm_task_var(6))
#define taskDim (__bang_wasm_task_var(7))
#define coreId (__bang_wasm_task_var(8))
#define coreDim (__bang_wasm_task_var(9))
#define clusterId (__bang_wasm_task_var(10))
#define clusterDim (__bang_wasm_task_var(11))

#ifdef __cplusplus
/* 16-bit classes cross into the host as their bits (bang_builtins.h) */
inline unsigned short __bang_wasm_bits(half h) { return h.bits; }
inline unsigned short __bang_wasm_bits(bfloat16_t b) { return b.value; }
template <class T>
T __bang_wasm_from_bits(unsigned short bits);
template <>
inline half __bang_wasm_from_bits<half>(unsigned short bits) {
  half h;
  h.bits = bits;
  return h;
}
template <>
inline bfloat16_t __bang_wasm_from_bits<bfloat16_t>(unsigned short bits) {
  bfloat16_t b;
  b.value = bits;
  return b;
}
/* every builtin the native device.h declares, as an import named by its signature and a function of its native
 * name (generated by bang_emu/wasm/api.py: build.py puts it on the include path) */
#include "bang_builtins.h"
#include "../../include/bang_emu/minmax.h"
#include "../../include/bang_emu/old_names.h"
/* header-only parts of the native device API, the same code in both flavours: rounding, libdevice's scalar
 * functions (__cn_scalar_*), the vector registers of __mlu_vector__ code */
#include "../../include/bang_emu/rounding.h"
#include "../../include/bang_emu/libdevice.h"
#include "../../include/bang_emu/vector_regs.h"
inline bool __is_ipu() { return coreId != 0x80; }
inline bool __is_mpu() { return coreId == 0x80; }
#define __bang_printf printf

/* What the shared rewriter (bang_emu/rewrite.py) writes into device code, given its wasm meaning. */
namespace bang_emu {
/* on-chip declarations: a reference into this core's (or cluster's) arena, fetched at each call */
inline void *onchip_alloc(int space, size_t bytes, const char *tag) { return __bang_wasm_onchip_alloc(space, bytes, tag); }
/* an initialised on-chip array's initial values (build.py _initialised_once): copied at its first use by this
 * thread only */
inline void onchip_init(void *array, const void *init, size_t bytes) {
  if (__bang_wasm_onchip_first_use(array)) __builtin_memcpy(array, init, bytes);
}
/* Launch sites. The rewriter makes each `k<<<...>>>(args)` a launch_cfg<SiteTag<file hash, line, index>>(...,
 * lambda calling k, args...), the same form as in the native device module (bang_emu/device.h). Here the call
 * instantiates the kernel and the site's invoker, ReplaySite<Tag, F, D...>::invoke(args, nbytes): it reads the
 * journal's argument bytes (placed in linear memory by the host) with their x86-64 sizes, packed one after the
 * other as the native ReplaySite::pack wrote them (pointers and long as 8 bytes), asks the host for each
 * pointer's offset (bang.launch_pointer: a journaled device buffer, or a trap), tells the host the kernel starts
 * (bang.launch_begin: the counters restart there, so the unpacking is not charged), and calls the kernel. The
 * host function holding the site is not exported, so the link drops it; the invoker is kept by a constructor that
 * takes its address (never run: the host does not call __wasm_call_ctors) and exported by sites.py under the
 * site's name. */
template <unsigned long long FileHash, int Line, int Index>
struct SiteTag {};
/* Struct arguments. The journal holds a struct's bytes as g++ laid it out on x86-64 (8-byte pointers and long,
 * their alignment and padding); build.py derives that layout from clang for x86-64 over this same translation unit
 * (its -fdump-record-layouts of X86Probe<T>, which the x86-64 pass instantiates for every struct argument) and
 * appends an X86Reader<T> specialisation: the journal's size of T and a read() of every member by name at its
 * x86-64 offset (read_field: pointers mapped, long narrowed, arrays element by element, nested structs flattened).
 * A struct without one (its layout could not be derived) stops the build by name. */
template <class T>
struct X86Probe {  // the x86-64 pass's marker: its layout dump names T and lays T out
  T value;
};
template <int N, class T>
struct X86ElementProbe {  // the same for the N-th array-of-structs member build.py asked about
  T value;
};
template <class T>
struct X86Reader {  // build.py specialises it for each struct argument whose x86-64 layout it derived
  static constexpr bool derived = false;
  static constexpr size_t size = 0;
};
constexpr bool kX86Pass = sizeof(void *) == 8;  // build.py's layout pass compiles this same text for x86-64
template <class T>
constexpr bool is_record_arg() {
  return std::is_class<T>::value && !std::is_same<T, half>::value;
}
template <class T, bool = is_record_arg<T>()>
struct X86Arg {  // the argument's size in the journal (x86-64, LP64)
  static constexpr bool is_long = std::is_same<T, long>::value || std::is_same<T, unsigned long>::value;
  static constexpr size_t size = std::is_pointer<T>::value || is_long ? 8 : sizeof(T);
  using Pointee = typename std::remove_cv<typename std::remove_pointer<T>::type>::type;
  static_assert(std::is_pointer<T>::value || std::is_arithmetic<T>::value || std::is_enum<T>::value ||
                    std::is_same<T, half>::value,
                "a kernel argument that is not a pointer, a number or a struct is not supported by the wasm replay");
  static_assert(!std::is_same<T, long double>::value,
                "a long double kernel argument (x87 extended natively, binary128 in wasm32) is not supported");
  static_assert(!std::is_pointer<T>::value ||
                    !(std::is_same<Pointee, long>::value || std::is_same<Pointee, unsigned long>::value),
                "a pointer to long (8-byte elements natively, 4 in wasm32) is not supported by the wasm replay");
};
template <class T>
struct X86Arg<T, true> {
  static constexpr bool is_long = false;
  static constexpr size_t size = kX86Pass ? sizeof(X86Probe<T>) : X86Reader<T>::size;
  static_assert(kX86Pass || X86Reader<T>::derived,
                "this struct kernel argument's x86-64 layout (the journal's) was not derived by the wasm build");
};
template <class T>
constexpr size_t x86_size() {
  if constexpr (std::is_array<T>::value)
    return std::extent<T>::value * x86_size<typename std::remove_extent<T>::type>();
  else
    return X86Arg<typename std::remove_cv<T>::type>::size;
}
template <class T>
T read_arg(const unsigned char *p, int index) {
  if constexpr (std::is_pointer<T>::value) {
    unsigned long long address;
    __builtin_memcpy(&address, p, 8);
    return (T)__bang_wasm_launch_pointer(address, index);
  } else if constexpr (is_record_arg<T>()) {
    alignas(T) unsigned char storage[sizeof(T)] = {};
    T &value = *reinterpret_cast<T *>(storage);
    if constexpr (!kX86Pass && X86Reader<T>::derived) X86Reader<T>::read(p, value, index);
    return value;
  } else if constexpr (X86Arg<T>::is_long) {
    long long value;
    __builtin_memcpy(&value, p, 8);
    return (T)__bang_wasm_launch_long(value, std::is_signed<T>::value, index);
  } else {
    T value;
    __builtin_memcpy((void *)&value, p, sizeof(T));
    return value;
  }
}
/* a member of a struct argument (X86Reader<T>::read): as an argument, but a pointer member outside every journaled
 * buffer is not refused (natively an unused slot is never followed), it becomes an offset where every access traps */
template <class T>
void read_field(const unsigned char *p, T &out, int index) {
  if constexpr (std::is_array<T>::value) {
    using E = typename std::remove_extent<T>::type;
    for (size_t i = 0; i < std::extent<T>::value; ++i) read_field(p + i * x86_size<E>(), out[i], index);
  } else if constexpr (std::is_pointer<T>::value) {
    static_assert(!std::is_function<typename std::remove_pointer<T>::type>::value,
                  "a function pointer in a struct kernel argument (a host address) is not supported by the wasm replay");
    (void)x86_size<T>();  // X86Arg's refusal of a pointer to long
    unsigned long long address;
    __builtin_memcpy(&address, p, 8);
    out = (T)__bang_wasm_launch_member_pointer(address, index);
  } else {
    (void)x86_size<T>();  // X86Arg's refusals (long double, pointer to long)
    out = read_arg<typename std::remove_cv<T>::type>(p, index);
  }
}
extern "C" __attribute__((noinline)) inline void bang_keep_site(int (*invoker)(const unsigned char *, unsigned)) {
  static int (*volatile kept)(const unsigned char *, unsigned);
  static void (*volatile hook)(void *, int);
  kept = invoker;
  hook = &__bang_wasm_scalar_store_gdram;
}
template <class Tag, class F, class... D>
struct ReplaySite {
  static constexpr size_t kBytes = (X86Arg<D>::size + ... + 0);
  static int invoke(const unsigned char *args, unsigned nbytes) {
    if (nbytes != kBytes) return 1;  // the native invoker's cnrtErrorArgsInvalid
    size_t off = 0;
    int index = 0;
    // braced initialisation: evaluated left to right, as packed
    std::tuple<D...> params{(off += X86Arg<D>::size, read_arg<D>(args + off - X86Arg<D>::size, index++))...};
    alignas(F) unsigned char closure[sizeof(F)] = {};  // F is a captureless lambda: any storage stands for it
    const F &fn = *reinterpret_cast<const F *>(closure);
    __bang_wasm_launch_begin();
    std::apply([&](D &...p) { fn(p...); }, params);
    return 0;
  }
  static inline const bool kept = (bang_keep_site(&invoke), true);
};
template <class Tag, class F, class... A>
void site(F fn, A &&...args) {
  if constexpr (!std::is_void<Tag>::value) (void)ReplaySite<Tag, F, typename std::decay<A>::type...>::kept;
  fn(args...);
}
template <class Tag = void, class D, class T, class F, class... A>
void launch_cfg(const char *, const char *, int, D, T, cnrtQueue_t, F fn, A &&...args) {
  site<Tag>(fn, std::forward<A>(args)...);
}
template <class Tag = void, class D, class T, class F, class... A>
void launch_cfg2(const char *, const char *, int, D, T, F fn, A &&...args) {
  site<Tag>(fn, std::forward<A>(args)...);
}
}  // namespace bang_emu
/* va_start/va_arg/va_copy: the native module checks the va_list's store first; in wasm it is the kernel's own
 * memory like any other, so nothing to check */
extern "C" inline void bang_emu_va_touch(void *, size_t) {}
#endif
#endif
