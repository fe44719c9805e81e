// Host entry of MatMul, stage "multicore".
#ifndef MATMUL_MULTICORE_H_
#define MATMUL_MULTICORE_H_

#include <cnrt.h>

// c[M][N] = a[M][K] x b[K][N], fp32, row-major, device pointers; launched on queue.
void matmul_multicore_entry(cnrtQueue_t queue, const float* a, const float* b, float* c, int M, int K, int N);

#endif  // MATMUL_MULTICORE_H_
