/* printf and its kin for device code in the wasm replay (linked after the device libc, which has no stdio): the
 * format and the arguments stay in the kernel's memory and the host formats them (bang.vprintf,
 * runtime/wasm_host.cpp), as the native device module's printf does through the runtime. In wasm32 a va_list is
 * the address of the arguments in linear memory, each at its size's alignment (floats promoted to double). */
#include <stdarg.h>

__attribute__((import_module("bang"), import_name("vprintf"))) int __bang_wasm_vprintf(const char *format,
                                                                                       const void *args);

int vprintf(const char *format, va_list args) { return __bang_wasm_vprintf(format, (const void *)args); }

int printf(const char *format, ...) {
  va_list args;
  va_start(args, format);
  int n = vprintf(format, args);
  va_end(args);
  return n;
}

int puts(const char *s) { return printf("%s\n", s); }

int putchar(int c) { return printf("%c", c); }
