// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104) for the signed trace; small on purpose so the image needs
// no crypto library. Checked against Python's hashlib/hmac in tests/emu/test_signed_trace.py.
#include <cstdlib>
#include <cstring>

#include "runtime.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace bang_emu {

namespace {
const uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
    0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
    0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
    0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

#if defined(__x86_64__)
// The SHA extensions (Intel SHA-NI, AMD Zen): ~8x the portable rounds below on an output record's megabytes (each
// call's output is hashed once in the run, trace.cpp). Message schedule W[16..63] four words at a time:
// W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16] -- msg1 gives W[t-16] + s0(W[t-15]), alignr W[t-7], msg2 the s1
// terms; msgs[i & 3] holds W[4i..4i+3] until replaced by W[4i+16..4i+19].
__attribute__((target("sha,sse4.1"))) void blocks_shani(uint32_t state[8], const uint8_t *p, size_t count) {
  const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);  // big-endian words
  __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(state)), 0xB1);      // CDAB
  __m128i state1 = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(state + 4)), 0x1B);  // EFGH
  __m128i state0 = _mm_alignr_epi8(tmp, state1, 8);    // ABEF
  state1 = _mm_blend_epi16(state1, tmp, 0xF0);         // CDGH
  for (; count; --count, p += 64) {
    const __m128i abef = state0, cdgh = state1;
    __m128i msgs[4];
    for (int i = 0; i < 4; ++i)
      msgs[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p + 16 * i)), swap);
    for (int r = 0; r < 16; ++r) {
      __m128i wk = _mm_add_epi32(msgs[r & 3], _mm_loadu_si128(reinterpret_cast<const __m128i *>(kK + 4 * r)));
      state1 = _mm_sha256rnds2_epu32(state1, state0, wk);
      if (r < 12) {
        __m128i next = _mm_sha256msg1_epu32(msgs[r & 3], msgs[(r + 1) & 3]);
        next = _mm_add_epi32(next, _mm_alignr_epi8(msgs[(r + 3) & 3], msgs[(r + 2) & 3], 4));
        msgs[r & 3] = _mm_sha256msg2_epu32(next, msgs[(r + 3) & 3]);
      }
      state0 = _mm_sha256rnds2_epu32(state0, state1, _mm_shuffle_epi32(wk, 0x0E));
    }
    state0 = _mm_add_epi32(state0, abef);
    state1 = _mm_add_epi32(state1, cdgh);
  }
  tmp = _mm_shuffle_epi32(state0, 0x1B);       // FEBA
  state1 = _mm_shuffle_epi32(state1, 0xB1);    // DCHG
  state0 = _mm_blend_epi16(tmp, state1, 0xF0);  // DCBA
  state1 = _mm_alignr_epi8(state1, tmp, 8);     // HGFE
  _mm_storeu_si128(reinterpret_cast<__m128i *>(state), state0);
  _mm_storeu_si128(reinterpret_cast<__m128i *>(state + 4), state1);
}

bool has_shani() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3)) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (b & (1u << 29)) != 0;  // CPUID.7.0:EBX.SHA
}
#endif

// BANG_EMU_SHA_PORTABLE=1: the portable rounds even where the extensions are (tests check both against hashlib).
bool use_shani() {
#if defined(__x86_64__)
  static const bool on = has_shani() && !std::getenv("BANG_EMU_SHA_PORTABLE");
  return on;
#else
  return false;
#endif
}
}  // namespace

Sha256::Sha256() {
  static const uint32_t init[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(h, init, sizeof h);
}

void Sha256::block(const uint8_t *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

void Sha256::update(const void *data, size_t n) {
  const uint8_t *p = static_cast<const uint8_t *>(data);
  total += n;
  if (fill) {
    size_t take = std::min(n, sizeof buf - fill);
    memcpy(buf + fill, p, take);
    fill += take, p += take, n -= take;
    if (fill < sizeof buf) return;
    block(buf);
    fill = 0;
  }
#if defined(__x86_64__)
  if (n >= 64 && use_shani()) {
    blocks_shani(h, p, n / 64);
    p += n / 64 * 64, n %= 64;
  }
#endif
  for (; n >= 64; p += 64, n -= 64) block(p);
  memcpy(buf, p, n);
  fill = n;
}

void Sha256::finish(uint8_t out[32]) {
  uint64_t bits = total * 8;
  uint8_t pad = 0x80;
  update(&pad, 1);
  uint8_t zero = 0;
  while (fill != 56) update(&zero, 1);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = (uint8_t)(bits >> (56 - 8 * i));
  update(len, 8);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = (uint8_t)(h[i] >> (24 - 8 * j));
}

void hmac_sha256(const uint8_t *key, size_t key_len, const void *data, size_t n, uint8_t out[32]) {
  uint8_t k[64] = {0};
  if (key_len > 64) {
    Sha256 s;
    s.update(key, key_len);
    s.finish(k);
  } else {
    memcpy(k, key, key_len);
  }
  uint8_t ipad[64], opad[64], inner[32];
  for (int i = 0; i < 64; ++i) ipad[i] = k[i] ^ 0x36, opad[i] = k[i] ^ 0x5c;
  Sha256 a;
  a.update(ipad, 64);
  a.update(data, n);
  a.finish(inner);
  Sha256 b;
  b.update(opad, 64);
  b.update(inner, 32);
  b.finish(out);
}

std::string to_hex(const uint8_t *p, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) s[2 * i] = digits[p[i] >> 4], s[2 * i + 1] = digits[p[i] & 15];
  return s;
}

}  // namespace bang_emu
