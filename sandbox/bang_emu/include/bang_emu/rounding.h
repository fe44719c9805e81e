/* Rounding of float into half, bfloat16 and integers, in the six modes BANG names by suffix: rn (nearest, ties to
 * even), rd (nearest, ties away from zero: cncc 5's "middle round"), tz (toward zero), oz (away from zero), up
 * (toward +inf), dn (toward -inf). One definition for the vector builtins (runtime) and the scalar conversion
 * functions (libdevice.h). Needs half and bfloat16_t (device.h). */
#ifndef BANG_EMU_ROUNDING_H_
#define BANG_EMU_ROUNDING_H_

#include <math.h>
#include <stdint.h>

#include <limits>

namespace bang_emu {
enum Rounding { round_rn, round_rd, round_tz, round_oz, round_up, round_dn };

// Raw bits, RNE conversion, value, and the first magnitude past the largest finite one (where an overflow
// rounding to nearest lands: infinity).
struct HalfFmt {
  typedef half T;
  static uint16_t bits(T h) { uint16_t b; __builtin_memcpy(&b, &h, 2); return b; }
  static T from_bits(uint16_t b) { T h; __builtin_memcpy(&h, &b, 2); return h; }
  static T nearest_even(float x) { return (T)x; }
  static double value(T h) { return (double)(float)h; }
  static constexpr double kOverflow = 65536.0;
};
struct Bf16Fmt {
  typedef bfloat16_t T;
  static uint16_t bits(T h) { return h.value; }
  static T from_bits(uint16_t b) { T h; h.value = b; return h; }
  static T nearest_even(float x) { return T(x); }
  static double value(T h) { return (double)(float)h; }
  static constexpr double kOverflow = 0x1p128;
};

// x in the narrow format F: the RNE result and its neighbour on the other side of x are the candidates; the mode
// picks one (exact in double, both formats being subsets of float).
template <class F>
inline typename F::T round_to(float x, Rounding mode) {
  typename F::T h = F::nearest_even(x);
  if (mode == round_rn || isnan(x) || isinf(x)) return h;
  double xv = x, hv = isinf(F::value(h)) ? copysign(F::kOverflow, xv) : F::value(h);
  if (hv == xv) return h;
  // one step of the magnitude bits toward / away from zero, sign kept; an overflow to infinity is outside x
  bool h_outside = isinf(F::value(h)) || fabs(hv) > fabs(xv);
  typename F::T other = F::from_bits((uint16_t)(F::bits(h) + (h_outside ? -1 : 1)));
  typename F::T toward = h_outside ? other : h, away = h_outside ? h : other;
  double tv = F::value(toward), av = isinf(F::value(away)) ? copysign(F::kOverflow, xv) : F::value(away);
  switch (mode) {
    case round_tz: return toward;
    case round_oz: return away;
    case round_up: return x > 0 ? away : toward;
    case round_dn: return x > 0 ? toward : away;
    default: return fabs(xv - tv) < fabs(av - xv) ? toward : away;  // round_rd: ties away from zero
  }
}

// v (a double, e.g. an int32 scaled by 2^pos) to float in the given mode
inline float round_float(double v, Rounding mode) {
  float f = (float)v;  // nearest even
  if (mode == round_rn || (double)f == v || isnan(v)) return f;
  float other = nextafterf(f, (double)f < v ? INFINITY : -INFINITY);
  float toward = fabs((double)f) < fabs(v) ? f : other, away = fabs((double)f) < fabs(v) ? other : f;
  switch (mode) {
    case round_tz: return toward;
    case round_oz: return away;
    case round_up: return v > 0 ? away : toward;
    case round_dn: return v > 0 ? toward : away;
    default: return fabs(v - (double)toward) < fabs((double)away - v) ? toward : away;  // round_rd
  }
}

// x to an integer type, saturating at its range (NaN gives 0; both assumed, the documents say nothing)
template <class I>
inline I round_int(double x, Rounding mode) {
  if (isnan(x)) return 0;
  double r;
  switch (mode) {
    case round_rn: r = nearbyint(x); break;  // the default FP environment rounds to nearest even
    case round_rd: r = round(x); break;
    case round_tz: r = trunc(x); break;
    case round_oz: r = x < 0 ? floor(x) : ceil(x); break;
    case round_up: r = ceil(x); break;
    default: r = floor(x); break;
  }
  if (r <= (double)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
  if (r >= (double)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
  return (I)r;
}
}  // namespace bang_emu

#endif /* BANG_EMU_ROUNDING_H_ */
