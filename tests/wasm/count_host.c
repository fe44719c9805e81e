/* Test host (wasm2c): runs one exported scalar matmul kernel of a counted device module on GDRAM buffers and
 * prints its result check and the module's six counters. Built by tests/wasm/test_wasm_build.py with
 * -DKERNEL=<the wasm2c name of the kernel's export> -DGDRAM_BASE=<layout.GDRAM_BASE>. The module imports only
 * env.memory (the scalar matmul calls no builtin). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "wasm-rt-impl.h"

struct Z_env_instance_t { int unused; };
static wasm_rt_memory_t g_memory;
wasm_rt_memory_t *Z_envZ_memory(struct Z_env_instance_t *env) { (void)env; return &g_memory; }

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  const unsigned M = atoi(argv[1]), K = atoi(argv[2]), N = atoi(argv[3]);
  const unsigned A = GDRAM_BASE, B = A + 4 * M * K, C = B + 4 * K * N, end = C + 4 * M * N;
  wasm_rt_init();
  wasm_rt_allocate_memory(&g_memory, (end + 65535) / 65536, 65536);
  Z_device_init_module();
  static Z_device_instance_t inst;
  struct Z_env_instance_t env;
  Z_device_instantiate(&inst, &env);
  float *a = (float *)(g_memory.data + A), *b = (float *)(g_memory.data + B), *c = (float *)(g_memory.data + C);
  for (unsigned i = 0; i < M * K; i++) a[i] = (float)((int)(i % 17) - 8) / 4.0f;
  for (unsigned i = 0; i < K * N; i++) b[i] = (float)((int)(i % 13) - 6) / 8.0f;
  wasm_rt_trap_t trap = wasm_rt_impl_try();
  if (trap != WASM_RT_TRAP_NONE) {
    printf("trap %d\n", (int)trap);
    return 3;
  }
  KERNEL(&inst, A, B, C, M, K, N);
  double worst = 0;
  for (unsigned i = 0; i < M; i++)
    for (unsigned j = 0; j < N; j++) {
      double s = 0;
      for (unsigned k = 0; k < K; k++) s += (double)a[i * K + k] * b[k * N + j];
      worst = fmax(worst, fabs(s - c[i * N + j]));
    }
  printf("max_abs_err %g\n", worst);
  printf("load_gdram %llu load_onchip %llu load_other %llu store_gdram %llu store_onchip %llu store_other %llu\n",
         (unsigned long long)*Z_deviceZ_bang_count_load_gdram(&inst),
         (unsigned long long)*Z_deviceZ_bang_count_load_onchip(&inst),
         (unsigned long long)*Z_deviceZ_bang_count_load_other(&inst),
         (unsigned long long)*Z_deviceZ_bang_count_store_gdram(&inst),
         (unsigned long long)*Z_deviceZ_bang_count_store_onchip(&inst),
         (unsigned long long)*Z_deviceZ_bang_count_store_other(&inst));
  Z_device_free(&inst);
  return 0;
}
