// A host main for the MLU270 GEMM tutorial's `3_gemm_CONV` (CambriconECO/BANGC_Gemm_Tutorial), whose own main
// needs OpenBLAS: drives the tutorial's unchanged Mlu_gemm (mlu_gemm16.cpp) and int8 __bang_conv kernel and
// checks C = A x B exactly (fixed-point positions -2 + -2, scales 1; every value is exact in half).
#include <stdint.h>
#include <stdio.h>
int Mlu_gemm(int8_t *A, int8_t *B, float *C, int32_t M, int32_t N, int32_t K, int16_t pos1, int16_t pos2,
             float scale1, float scale2, float &return_time);
int main() {
  const int M = 64, K = 128, N = 512;
  static int8_t a[M * K], bt[N * K];
  static float c[M * N];
  for (int i = 0; i < M * K; i++) a[i] = (int8_t)((i * 3) % 7 - 3);
  for (int i = 0; i < N * K; i++) bt[i] = (int8_t)((i * 5 + i / K) % 7 - 3);
  float t = 0;
  Mlu_gemm(a, bt, c, M, N, K, -2, -2, 1.0f, 1.0f, t);
  int bad = 0;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      int s = 0;
      for (int k = 0; k < K; k++) s += a[m * K + k] * bt[n * K + k];
      if (c[m * N + n] != s / 16.0f) bad++;
    }
  printf("mismatches %d time %f\n", bad, t);
  return bad != 0;
}
