// Host entry of MatMul, stage "sram_union".
#ifndef MATMUL_SRAM_UNION_H_
#define MATMUL_SRAM_UNION_H_

#include <cnrt.h>

// c[M][N] = a[M][K] x b[K][N], fp32, row-major, device pointers; launched on queue.
void matmul_sram_union_entry(cnrtQueue_t queue, const float* a, const float* b, float* c, int M, int K, int N);

#endif  // MATMUL_SRAM_UNION_H_
