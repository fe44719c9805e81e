/* min/max of device code, for both flavours of the device header (device.h, the wasm bang.h), after `half`. */
#ifndef BANG_EMU_MINMAX_H_
#define BANG_EMU_MINMAX_H_
#include <type_traits>

/* min/max as cncc's __clang_bang_cmath.h gives device code (overloads for int16/32, uint16/32, half, float).
 * Templates here, so that a student's own `int max(int, int)` or `using namespace std` still wins
 * overload resolution, as it does next to cncc's device-only overloads. */
template <class A, class B>
using bang_emu_minmax_t = typename std::enable_if<(std::is_arithmetic<A>::value || std::is_same<A, half>::value) &&
                                                      (std::is_arithmetic<B>::value || std::is_same<B, half>::value),
                                                  typename std::common_type<A, B>::type>::type;
template <class A, class B>
inline bang_emu_minmax_t<A, B> min(A a, B b) { return b < a ? b : a; }
template <class A, class B>
inline bang_emu_minmax_t<A, B> max(A a, B b) { return a < b ? b : a; }

#endif
