// Host entry of MatMul, stage "scalar_gdram".
#ifndef MATMUL_SCALAR_GDRAM_H_
#define MATMUL_SCALAR_GDRAM_H_

#include <cnrt.h>

// c[M][N] = a[M][K] x b[K][N], row-major device pointers, fp32 or (is_half) fp16, summed in fp32; launched
// on queue. workspace: M * N floats of device memory for fp16's partial sums (unused for fp32: may be null).
void matmul_scalar_gdram_entry(cnrtQueue_t queue, const void* a, const void* b, void* c, float* workspace, int M, int K,
                               int N, bool is_half);

#endif  // MATMUL_SCALAR_GDRAM_H_
