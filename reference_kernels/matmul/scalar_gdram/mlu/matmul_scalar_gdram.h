// Host entry of MatMul, stage "scalar_gdram".
#ifndef MATMUL_SCALAR_GDRAM_H_
#define MATMUL_SCALAR_GDRAM_H_

#include <cnrt.h>

// c[M][N] = a[M][K] x b[K][N], fp32, row-major, device pointers; launched on queue.
void matmul_scalar_gdram_entry(cnrtQueue_t queue, const float* a, const float* b, float* c, int M, int K, int N);

#endif  // MATMUL_SCALAR_GDRAM_H_
