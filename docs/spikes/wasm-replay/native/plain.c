#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
__attribute__((noinline)) void mm(const float *a, const float *b, float *c, int M, int K, int N) {
  for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) { float s = 0; for (int k = 0; k < K; ++k) s += a[(long)i*K+k]*b[(long)k*N+j]; c[(long)i*N+j] = s; }
}
__attribute__((noinline)) void sig(const float *x, float *y, long n) {
  for (long i = 0; i < n; i++) { float v = x[i]; y[i] = v <= -7.75f ? 0 : v >= 7.75f ? 1 : 1.0f / (1.0f + expf(-v)); }
}
int main() {
  int S = 256; long n = 1 << 20;
  float *x = malloc(4*n), *y = malloc(4*n), *a = malloc(4*S*S), *b = malloc(4*S*S), *c = malloc(4*S*S);
  for (long i = 0; i < n; i++) x[i] = (float)((i % 2001) - 1000) / 100.0f;
  for (int i = 0; i < S*S; i++) { a[i] = x[i]; b[i] = x[i+5]; }
  for (int r = 0; r < 3; r++) { double t0 = now(); sig(x, y, n); double t1 = now(); mm(a, b, c, S, S, S); double t2 = now();
    printf("plain gcc -O2: sigmoid %.3f ms matmul %.3f ms (c0 %.6f)\n", 1e3*(t1-t0), 1e3*(t2-t1), c[0]); }
}
