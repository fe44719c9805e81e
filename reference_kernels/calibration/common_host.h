// Host-side helpers shared by the six calibration programs (lab style: each program is standalone
// apart from this header). Plain C++; builds with cncc on a real MLU370 as well as with cncc-emu.
#ifndef CALIBRATION_COMMON_HOST_H_
#define CALIBRATION_COMMON_HOST_H_

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned int rng_state = 12345u;
static float random_float(float lo, float hi) {
  rng_state = rng_state * 1664525u + 1013904223u;  // LCG: fast enough for 10^8 inputs
  return lo + (hi - lo) * ((rng_state >> 8) * (1.0f / 16777216.0f));
}

static void fill_random(float *p, long n) {
  for (long i = 0; i < n; i++) p[i] = random_float(-1.0f, 1.0f);
}

// right[n][k] (reduction n, output width k) as __bang_matmul reads its right operand from WRAM: k rows of n
// (column-major), column j in row (j % 64) * (k / 64) + j / 64 -- the weight-line order __bang_reshape_filter
// writes (mlu-ops' FFT), the plain transpose for k <= 64. k must then be a multiple of 64. Caller frees.
static float *wram_rhs_layout(const float *right, int n, int k) {
  float *out = (float *)malloc(sizeof(float) * n * k);
  for (int j = 0; j < k; j++) {
    long row = k > 64 ? (long)(j % 64) * (k / 64) + j / 64 : j;
    for (int x = 0; x < n; x++) out[row * n + x] = right[(long)x * k + j];
  }
  return out;
}

// Checks every `row_step`-th row of result[m][k] = left[m][n] x right[n][k] against a double reference.
static int check_result(const float *left, const float *right, const float *result, int m, int n, int k,
                        int row_step) {
  double max_err = 0.0;
  for (int i = 0; i < m; i += row_step) {
    for (int j = 0; j < k; j++) {
      double ref = 0.0, mag = 0.0;
      for (int x = 0; x < n; x++) {
        ref += (double)left[(long)i * n + x] * right[(long)x * k + j];
        mag += fabs((double)left[(long)i * n + x] * right[(long)x * k + j]);
      }
      double err = fabs(ref - result[(long)i * k + j]) / (mag + 1e-30);
      if (err > max_err) max_err = err;
    }
  }
  printf("max error relative to sum|a*b|: %.3e (rows checked: every %d)\n", max_err, row_step);
  return max_err < 1e-5;
}

#endif
