// Small helpers shared by the reference kernels (the mlu-ops kernel.h conventions).
#ifndef REFERENCE_BANG_UTILS_H_
#define REFERENCE_BANG_UTILS_H_

#include <bang.h>
#include <stdint.h>

#define CEIL_DIV(x, y) (((x) + (y) - 1) / (y))
#define CEIL_ALIGN(x, a) (CEIL_DIV(x, a) * (a))
#define FLOOR_ALIGN(x, a) ((x) / (a) * (a))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

// cncc keeps the stack in NRAM by default, so 128 KB of it is left alone (the mlu-ops convention).
#ifdef __BANG_ARCH__
#define NRAM_BUDGET_BYTES (__MLU_NRAM_SIZE__ * 1024 - 128 * 1024)
#define WRAM_BUDGET_BYTES (__MLU_WRAM_SIZE__ * 1024)
#define SRAM_BUDGET_BYTES (__MLU_SRAM_SIZE__ * 1024 - 128 * 1024)
#else
// Host pass: the MLU370 figures; device code never reads these.
#define NRAM_BUDGET_BYTES (640 * 1024)
#define WRAM_BUDGET_BYTES (1024 * 1024)
#define SRAM_BUDGET_BYTES (3968 * 1024)
#endif

// The vector unit works on 128-byte lines; counts are padded to 64 elements as in the lab template.
#define VECTOR_ALIGN_ELEMS 64

// The part [*begin, *end) of `total` items that task `index` of `count` owns: contiguous, the first
// total % count tasks one item more, so the parts tile [0, total) exactly. (The official Sigmoid
// template offsets by taskId * nram_limit and drops total % taskDim: right only for one task.)
__mlu_func__ void task_range(int64_t total, int index, int count, int64_t* begin, int64_t* end) {
  const int64_t per_task = total / count;
  const int64_t remainder = total % count;
  *begin = index * per_task + MIN((int64_t)index, remainder);
  *end = *begin + per_task + (index < remainder ? 1 : 0);
}

// n fp32 results (NRAM) in the type of out: acc itself for fp32; for fp16 rounded to nearest into `rounded`
// (n a multiple of 64). The output pointer only picks the overload.
__mlu_func__ const float* result_in_output_type(const float* /*out*/, const float* acc, float* /*rounded*/,
                                                int /*n*/) {
  return acc;
}
__mlu_func__ const half* result_in_output_type(const half* /*out*/, const float* acc, half* rounded, int n) {
  __bang_float2half_rn(rounded, acc, n);
  return rounded;
}

#endif  // REFERENCE_BANG_UTILS_H_
