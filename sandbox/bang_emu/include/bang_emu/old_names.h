/* Old names of builtins, defined by the current ones: included after every builtin is declared, by both flavours of
 * the device header (device.h, the wasm bang.h). */
#ifndef BANG_EMU_OLD_NAMES_H_
#define BANG_EMU_OLD_NAMES_H_

/* MLU100/270-era names of __nramset, typed (cncc's __clang_bang header, arch >= 200) */
inline void __nramset_half(half *dst, int n, half v) { __nramset(dst, n, v); }
inline void __nramset_float(float *dst, int n, float v) { __nramset(dst, n, v); }
inline void __nramset_int(int *dst, int n, int v) { __nramset(dst, n, v); }
inline void __nramset_unsigned_int(unsigned int *dst, int n, unsigned int v) { __nramset(dst, n, v); }
inline void __nramset_short(short *dst, int n, short v) { __nramset(dst, n, v); }
inline void __nramset_unsigned_short(unsigned short *dst, int n, unsigned short v) { __nramset(dst, n, v); }

#endif
