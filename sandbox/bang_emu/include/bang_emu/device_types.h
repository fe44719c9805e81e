/* Device types both flavours of the device header share: the native one (device.h) and the wasm replay's
 * (bang_emu/wasm/include/bang.h), so a kernel's bfloat16 arithmetic and copy directions mean the same in both. */
#ifndef BANG_EMU_DEVICE_TYPES_H_
#define BANG_EMU_DEVICE_TYPES_H_
#include <stdint.h>

typedef int8_t int8;
typedef int16_t int16;
typedef int8_t fix8;
/* bfloat16 (cncc: a device type on 5xx): the raw bits in `value`, converted like real bf16 -- to float exactly,
 * from float rounding to nearest even -- so arithmetic runs in float and rounds back once per assignment. */
struct bfloat16_t {
  unsigned short value;
  bfloat16_t() = default;
  bfloat16_t(float f) : value(from_float(f)) {}
  operator float() const {
    unsigned int bits = (unsigned int)value << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  }
  static unsigned short from_float(float f) {
    unsigned int bits;
    __builtin_memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((bits >> 16) | 0x40);  // quiet NaN
    return (unsigned short)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
};

typedef enum {
  GDRAM2NRAM = 0,
  NRAM2GDRAM,
  LDRAM2NRAM,
  NRAM2LDRAM,
  GDRAM2WRAM,
  WRAM2GDRAM,
  LDRAM2WRAM,
  WRAM2LDRAM,
  NRAM2NRAM,
  NRAM2WRAM,
  WRAM2NRAM,
  GDRAM2SRAM,
  SRAM2GDRAM,
  LDRAM2SRAM,
  SRAM2LDRAM,
  SRAM2NRAM,
  NRAM2SRAM,
  SRAM2WRAM,
  WRAM2SRAM,
  SRAM2SRAM,
  GDRAM2GDRAM,
  GDRAM2LDRAM,
  LDRAM2GDRAM,
  LDRAM2LDRAM
} mluMemcpyDirection_t;

typedef enum {
  FUSION_FMA = 0,
  FUSION_FMS,
  FUSION_FAM,
  FUSION_FSM,
  FUSION_FAA,
  FUSION_FAS,
  FUSION_FSA,
  FUSION_FSS,
} bang_fusion_op_t;

/* the six rounding modes BANG names by suffix (rounding.h says what each does) */
#define BANG_EMU_ROUNDINGS(X) X(rn) X(rd) X(tz) X(oz) X(up) X(dn)

#endif
