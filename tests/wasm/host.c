/* Test host (wasm2c + gcc) for tests/wasm. Two ways, chosen at build time:
 * - a kernel called directly (test_wasm_build.py): -DKERNEL=<the wasm2c name of the kernel's export>, -DMATMUL for a
 *   matmul kernel (a, b, c, M, K, N), else a sigmoid kernel (x, y, count); arguments M K N or N. Prints the result
 *   check and the module's six counters.
 * - a journal replayed through a launch site (test_wasm_sites.py): -DREPLAY -DINVOKER=<the wasm2c name of the
 *   site's export>; arguments PLAN OUTPUT. The plan (written by the test from a native journal, little-endian):
 *   u32 memory pages; u32 n, n x (u64 journal address, u64 bytes, u32 offset): the GDRAM map (layout.GdramMap);
 *   then operations: 'W' u32 offset, u32 n, n bytes (write memory); 'L' u32 n, n bytes (a launch's argument
 *   bytes: placed at ARGS_BASE, the invoker called; prints its status and the counters); 'O' u32 offset, u32 n
 *   (append memory to OUTPUT).
 * Both get -DGDRAM_BASE/-DNRAM_BASE/-DWRAM_BASE/-DSRAM_BASE/-DARGS_BASE/-DARGS_BYTES (layout.py) and -DWITH_BANG when the module imports
 * builtins. The few builtins here are the least a reference kernel needs (plain copies, sigmoid, on-chip arrays,
 * the launch's pointer map), with no cost model: the replay's host is the next piece. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "wasm-rt-impl.h"

struct Z_env_instance_t { int unused; };
static wasm_rt_memory_t g_memory;
static uint64_t g_end; /* the memory's size in bytes */
wasm_rt_memory_t *Z_envZ_memory(struct Z_env_instance_t *env) { (void)env; return &g_memory; }

static Z_device_instance_t g_inst;

#ifdef WITH_BANG
/* the GDRAM map: journal address -> offset (empty when a kernel is called directly) */
static struct { uint64_t lo, bytes; u32 offset; } g_map[64];
static u32 g_map_n;
static int g_launch_begun;
#define ARENA (1024u * 1024u) /* per space: one NRAM, WRAM and SRAM arena at the layout's bases */
struct Z_bang_instance_t { u32 tag[64], off[64], used[3]; int n; };
static void kernel_error(const char *what) {
  fprintf(stderr, "kernel error: %s\n", what);
  wasm_rt_trap(WASM_RT_TRAP_UNREACHABLE);
}
static u8 *operand(u32 off, uint64_t n) {
  if ((uint64_t)off + n > g_end) kernel_error("operand out of the memory");
  return g_memory.data + off;
}
u32 Z_bangZ_task_var(struct Z_bang_instance_t *b, u32 which) {
  (void)b;
  return which == 3 || which == 4 || which == 5 || which == 7 || which == 9 || which == 11; /* dims 1, ids 0 */
}
u32 Z_bangZ_onchip_alloc(struct Z_bang_instance_t *b, u32 space, u32 bytes, u32 tag) {
  if (space < 2 || space > 4) kernel_error("on-chip space");
  for (int i = 0; i < b->n; i++)
    if (b->tag[i] == tag) return b->off[i];
  u32 at = (b->used[space - 2] + 127u) & ~127u;
  if (b->n == 64 || (uint64_t)at + bytes > ARENA) kernel_error("on-chip arrays exceed the space");
  b->used[space - 2] = at + bytes;
  b->tag[b->n] = tag;
  b->off[b->n] = (space == 2 ? NRAM_BASE : space == 3 ? WRAM_BASE : SRAM_BASE) + at;
  return b->off[b->n++];
}
/* builtins: the imports are named by their native signatures (bang_emu/wasm/api.py); the test passes each C name
 * as a macro (B_MEMCPY ...: wasm_helpers.HOST_IMPORTS) */
void B_MEMCPY(struct Z_bang_instance_t *b, u32 dst, u32 src, u32 size, u32 dir) {
  (void)b, (void)dir;
  memmove(operand(dst, size), operand(src, size), size);
}
void B_MEMCPY_ASYNC(struct Z_bang_instance_t *b, u32 dst, u32 src, u32 size, u32 dir) {
  B_MEMCPY(b, dst, src, size, dir);
}
void B_MEMCPY_STRIDED(struct Z_bang_instance_t *b, u32 dst, u32 src, u32 size, u32 dir, u32 dst_stride,
                      u32 src_stride, u32 segnum) {
  for (uint64_t i = 0; i <= segnum; i++)
    B_MEMCPY(b, (u32)(dst + i * (int32_t)dst_stride), (u32)(src + i * (int32_t)src_stride), size, dir);
}
void B_MEMCPY_ASYNC_STRIDED(struct Z_bang_instance_t *b, u32 dst, u32 src, u32 size, u32 dir, u32 dst_stride,
                            u32 src_stride, u32 segnum) {
  B_MEMCPY_STRIDED(b, dst, src, size, dir, dst_stride, src_stride, segnum);
}
void B_SYNC(struct Z_bang_instance_t *b) { (void)b; }
u32 Z_bangZ_launch_pointer(struct Z_bang_instance_t *b, u64 address, u32 index) {
  (void)b;
  if (address == 0) return 0; /* a null pointer stays null */
  for (u32 i = 0; i < g_map_n; i++)
    if (address >= g_map[i].lo && address - g_map[i].lo <= g_map[i].bytes)
      return g_map[i].offset + (u32)(address - g_map[i].lo);
  fprintf(stderr, "launch argument %u: pointer %#llx is not inside any journaled device buffer\n", index,
          (unsigned long long)address);
  kernel_error("forged launch pointer");
  return 0;
}
/* an initialised on-chip array's first use (one thread here) */
u32 Z_bangZ_onchip_first_use(struct Z_bang_instance_t *b, u32 array) {
  static u32 seen[256], n_seen;
  (void)b;
  for (u32 i = 0; i < n_seen; i++)
    if (seen[i] == array) return 0;
  if (n_seen < 256) seen[n_seen++] = array;
  return 1;
}
/* a struct argument's pointer member: as above, but an address outside every buffer becomes the memory's end */
u32 Z_bangZ_launch_member_pointer(struct Z_bang_instance_t *b, u64 address, u32 index) {
  (void)b;
  (void)index;
  if (address == 0) return 0;
  for (u32 i = 0; i < g_map_n; i++)
    if (address >= g_map[i].lo && address - g_map[i].lo <= g_map[i].bytes)
      return g_map[i].offset + (u32)(address - g_map[i].lo);
  return 0xFFFF0000u;
}
u32 Z_bangZ_launch_long(struct Z_bang_instance_t *b, u64 value, u32 is_signed, u32 index) {
  (void)b;
  if (is_signed ? (int64_t)value != (int32_t)value : value > 0xffffffffu) {
    fprintf(stderr, "launch argument %u: %lld does not fit wasm32's 32-bit long\n", index, (long long)value);
    kernel_error("long argument out of range");
  }
  return (u32)value;
}
static void reset_counters(void) {
  *Z_deviceZ_bang_count_load_gdram(&g_inst) = *Z_deviceZ_bang_count_load_nram(&g_inst) = 0;
  *Z_deviceZ_bang_count_load_wram(&g_inst) = *Z_deviceZ_bang_count_load_sram(&g_inst) = 0;
  *Z_deviceZ_bang_count_load_other(&g_inst) = *Z_deviceZ_bang_count_store_gdram(&g_inst) = 0;
  *Z_deviceZ_bang_count_store_nram(&g_inst) = *Z_deviceZ_bang_count_store_wram(&g_inst) = 0;
  *Z_deviceZ_bang_count_store_sram(&g_inst) = *Z_deviceZ_bang_count_store_other(&g_inst) = 0;
}
void Z_bangZ_scalar_store_gdram(struct Z_bang_instance_t *b, u32 address, u32 bytes) {
  (void)b, (void)address, (void)bytes; /* provenance is the replay's (runtime/wasm_host.cpp) */
}
void Z_bangZ_launch_begin(struct Z_bang_instance_t *b) {
  (void)b;
  if (g_launch_begun++) kernel_error("launch_begin called twice in one launch (only a site's invoker calls it)");
  reset_counters(); /* the invoker's unpacking is not the kernel's work */
}
void B_SIGMOID_F32(struct Z_bang_instance_t *b, u32 dst, u32 src, u32 n) {
  (void)b;
  float *d = (float *)operand(dst, 4ull * n), *s = (float *)operand(src, 4ull * n);
  for (u32 i = 0; i < n; i++) d[i] = 1.0f / (1.0f + expf(-s[i]));
}
void B_SIGMOID_F16(struct Z_bang_instance_t *b, u32 dst, u32 src, u32 n) {
  (void)b, (void)dst, (void)src, (void)n;
  kernel_error("half builtins are not in the test host");
}
void B_F2H(struct Z_bang_instance_t *b, u32 dst, u32 src, u32 n) {
  B_SIGMOID_F16(b, dst, src, n);
}
#endif

static void print_counters(void) {
  static const char *const names[10] = {"load_gdram", "load_nram", "load_wram", "load_sram", "load_other",
                                        "store_gdram", "store_nram", "store_wram", "store_sram", "store_other"};
  u64 *const counters[10] = {
      Z_deviceZ_bang_count_load_gdram(&g_inst), Z_deviceZ_bang_count_load_nram(&g_inst),
      Z_deviceZ_bang_count_load_wram(&g_inst),  Z_deviceZ_bang_count_load_sram(&g_inst),
      Z_deviceZ_bang_count_load_other(&g_inst), Z_deviceZ_bang_count_store_gdram(&g_inst),
      Z_deviceZ_bang_count_store_nram(&g_inst), Z_deviceZ_bang_count_store_wram(&g_inst),
      Z_deviceZ_bang_count_store_sram(&g_inst), Z_deviceZ_bang_count_store_other(&g_inst)};
  for (int k = 0; k < 10; k++) printf("%s%s %llu", k ? " " : "", names[k], (unsigned long long)*counters[k]);
  printf("\n");
}

static void instantiate(uint64_t bytes) {
  g_end = bytes;
  wasm_rt_init();
  wasm_rt_allocate_memory(&g_memory, g_end / 65536, 65536);
  Z_device_init_module();
  static struct Z_env_instance_t env;
#ifdef WITH_BANG
  static struct Z_bang_instance_t bang;
  Z_device_instantiate(&g_inst, &bang, &env);
#else
  Z_device_instantiate(&g_inst, &env);
#endif
}

#ifdef REPLAY
static void need(FILE *f, void *p, size_t n) {
  if (fread(p, 1, n, f) != n) {
    fprintf(stderr, "truncated plan\n");
    exit(2);
  }
}

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  FILE *plan = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
  if (!plan || !out) return 2;
  u32 pages, n;
  need(plan, &pages, 4);
  instantiate((uint64_t)pages * 65536);
  need(plan, &g_map_n, 4);
  if (g_map_n > 64) return 2;
  for (u32 i = 0; i < g_map_n; i++) {
    need(plan, &g_map[i].lo, 8);
    need(plan, &g_map[i].bytes, 8);
    need(plan, &g_map[i].offset, 4);
  }
  wasm_rt_trap_t trap = wasm_rt_impl_try();
  if (trap != WASM_RT_TRAP_NONE) {
    printf("trap %d\n", (int)trap);
    return 3;
  }
  int op;
  while ((op = fgetc(plan)) != EOF) {
    u32 off = 0;
    if (op == 'L') {
      need(plan, &n, 4);
      if (n > ARGS_BYTES) return 2;
      need(plan, g_memory.data + ARGS_BASE, n);
      g_launch_begun = 0;
      u32 status = INVOKER(&g_inst, ARGS_BASE, n);
      printf("launch %u begun %d\n", status, g_launch_begun);
      print_counters();
      continue;
    }
    need(plan, &off, 4);
    need(plan, &n, 4);
    if ((uint64_t)off + n > g_end) return 2;
    if (op == 'W') need(plan, g_memory.data + off, n);
    else if (op == 'O') fwrite(g_memory.data + off, 1, n, out);
    else return 2;
  }
  fclose(out);
  Z_device_free(&g_inst);
  return 0;
}
#else
int main(int argc, char **argv) {
#ifdef MATMUL
  const int matmul = 1;
  if (argc != 4) return 2;
  const unsigned M = atoi(argv[1]), K = atoi(argv[2]), N = atoi(argv[3]);
#else
  const int matmul = 0;
  if (argc != 2) return 2;
  const unsigned M = atoi(argv[1]), K = 0, N = 0;
#endif
  const unsigned A = GDRAM_BASE, B = A + 4 * (matmul ? M * K : M), C = B + 4 * (matmul ? K * N : M);
  instantiate(((uint64_t)C + 4ull * M * N + 65535) / 65536 * 65536);
  float *a = (float *)(g_memory.data + A), *b = (float *)(g_memory.data + B), *c = (float *)(g_memory.data + C);
  for (unsigned i = 0; i < (matmul ? M * K : M); i++) a[i] = (float)((int)(i % 17) - 8) / 4.0f;
  for (unsigned i = 0; i < K * N; i++) b[i] = (float)((int)(i % 13) - 6) / 8.0f;
  wasm_rt_trap_t trap = wasm_rt_impl_try();
  if (trap != WASM_RT_TRAP_NONE) {
    printf("trap %d\n", (int)trap);
    return 3;
  }
  double worst = 0;
#ifdef MATMUL
  {
    KERNEL(&g_inst, A, B, C, M, K, N);
    for (unsigned i = 0; i < M; i++)
      for (unsigned j = 0; j < N; j++) {
        double s = 0;
        for (unsigned k = 0; k < K; k++) s += (double)a[i * K + k] * b[k * N + j];
        worst = fmax(worst, fabs(s - c[i * N + j]));
      }
  }
#else
  KERNEL(&g_inst, A, B, (u64)M);
  for (unsigned i = 0; i < M; i++) worst = fmax(worst, fabs(1.0 / (1.0 + exp(-(double)a[i])) - b[i]));
#endif
  printf("max_abs_err %g\n", worst);
  print_counters();
  Z_device_free(&g_inst);
  return 0;
}
#endif
