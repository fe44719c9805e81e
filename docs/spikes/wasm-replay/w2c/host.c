/* wasm2c host for the spike: implements module "bang" (builtins, task variables, on-chip allocator, barriers)
 * and, for the instrumented build, module "env"'s load/store hooks (scalar access counting by address space).
 * The clock and the counters live in this file's C objects: outside the wasm linear memory. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <kernels.h>
#include <wasm-rt-impl.h>

#define KiB 1024u
#define MiB (1024u * 1024u)
#define MAX_CORES 4
#define NRAM_SIZE (768 * KiB)
#define WRAM_SIZE (1024 * KiB)
#define SRAM_SIZE (4 * MiB)
#define ONCHIP_BASE (1 * MiB)
#define NRAM_BASE(c) (ONCHIP_BASE + (c) * NRAM_SIZE)
#define WRAM_BASE(c) (ONCHIP_BASE + MAX_CORES * NRAM_SIZE + (c) * WRAM_SIZE)
#define SRAM_BASE (ONCHIP_BASE + MAX_CORES * (NRAM_SIZE + WRAM_SIZE))
#define GDRAM_BASE (64 * MiB)
enum { SP_GDRAM, SP_NRAM, SP_WRAM, SP_SRAM, SP_STACK, SP_OTHER, SP_N };
static const char *SPN[SP_N] = {"gdram", "nram", "wram", "sram", "stack/data", "other"};

static wasm_rt_memory_t g_mem;      /* the one linear memory all cores import */
static uint32_t g_gdram_end;        /* end of the GDRAM region (bytes) */

/* one per emulated core: NOT in linear memory */
struct Z_bang_instance_t {
  Z_kernels_instance_t inst;
  int core;
  int vars[12];
  double clock_cycles;                       /* the modelled clock */
  unsigned long long loads[SP_N], stores[SP_N], dma_bytes, vector_elems, builtin_calls;
  uint32_t onchip_off[3][64];
  uint32_t onchip_used[3];
};
struct Z_env_instance_t { int unused; };
static struct Z_env_instance_t g_env;
struct Z_bang_instance_t *g_cores[MAX_CORES];
static int g_ncores = 1;
static pthread_barrier_t g_cluster_barrier;

static int space_of(uint32_t a) {
  if (a >= GDRAM_BASE && a < g_gdram_end) return SP_GDRAM;
  if (a >= ONCHIP_BASE && a < WRAM_BASE(0)) return SP_NRAM;
  if (a >= WRAM_BASE(0) && a < SRAM_BASE) return SP_WRAM;
  if (a >= SRAM_BASE && a < SRAM_BASE + SRAM_SIZE) return SP_SRAM;
  if (a < ONCHIP_BASE) return SP_STACK;
  return SP_OTHER;
}
static void kernel_error(struct Z_bang_instance_t *b, const char *what) {
  fprintf(stderr, "core %d: kernel error: %s\n", b->core, what);
  wasm_rt_trap(WASM_RT_TRAP_UNREACHABLE); /* unwinds to wasm_rt_impl_try in the launcher */
}
/* operand check: [off, off+n) must lie in the given space (own core's NRAM/WRAM, the cluster's SRAM, GDRAM) */
static uint8_t *operand(struct Z_bang_instance_t *b, uint32_t off, uint64_t n, int sp, const char *what) {
  uint64_t lo, hi;
  switch (sp) {
    case SP_GDRAM: lo = GDRAM_BASE; hi = g_gdram_end; break;
    case SP_NRAM: lo = NRAM_BASE(b->core); hi = lo + NRAM_SIZE; break;
    case SP_WRAM: lo = WRAM_BASE(b->core); hi = lo + WRAM_SIZE; break;
    case SP_SRAM: lo = SRAM_BASE; hi = lo + SRAM_SIZE; break;
    default: lo = hi = 0;
  }
  if (off < lo || (uint64_t)off + n > hi) kernel_error(b, what);
  return g_mem.data + off;
}

u32 Z_bangZ_task_var(struct Z_bang_instance_t *b, u32 which) { return which < 12 ? (u32)b->vars[which] : 0; }
u32 Z_bangZ_onchip_alloc(struct Z_bang_instance_t *b, u32 space, u32 bytes, u32 index) {
  if (space > 2 || index >= 64) kernel_error(b, "onchip index");
  if (!b->onchip_off[space][index]) {
    uint32_t cap = space == 0 ? NRAM_SIZE : space == 1 ? WRAM_SIZE : SRAM_SIZE;
    uint32_t at = (b->onchip_used[space] + 127) & ~127u;
    if ((uint64_t)at + bytes > cap) kernel_error(b, "on-chip arrays exceed the space (nram_overflow)");
    b->onchip_used[space] = at + bytes;
    b->onchip_off[space][index] = at + 1;
  }
  uint32_t base = space == 0 ? NRAM_BASE(b->core) : space == 1 ? WRAM_BASE(b->core) : SRAM_BASE;
  return base + b->onchip_off[space][index] - 1;
}
static void dir_spaces(int dir, int *d, int *s) {
  static const int t[][2] = {{SP_NRAM, SP_GDRAM}, {SP_GDRAM, SP_NRAM}, {-1, -1}, {-1, -1}, {SP_WRAM, SP_GDRAM},
                             {SP_GDRAM, SP_WRAM}, {-1, -1}, {-1, -1}, {SP_NRAM, SP_NRAM}, {SP_WRAM, SP_NRAM},
                             {SP_NRAM, SP_WRAM}, {SP_SRAM, SP_GDRAM}, {SP_GDRAM, SP_SRAM}, {-1, -1}, {-1, -1},
                             {SP_NRAM, SP_SRAM}, {SP_SRAM, SP_NRAM}, {SP_WRAM, SP_SRAM}, {SP_SRAM, SP_WRAM},
                             {SP_SRAM, SP_SRAM}, {SP_GDRAM, SP_GDRAM}};
  if (dir < 0 || dir > 20) { *d = *s = -1; return; }
  *d = t[dir][0]; *s = t[dir][1];
}
static void charge_dma(struct Z_bang_instance_t *b, uint64_t bytes) {
  b->dma_bytes += bytes;
  b->clock_cycles += 200.0 + bytes / 32.0; /* placeholder cost model: latency + bandwidth */
}
void Z_bangZ_memcpy(struct Z_bang_instance_t *b, u32 dst, u32 src, u32 size, u32 dir, u32 async) {
  int ds, ss; dir_spaces((int)dir, &ds, &ss);
  if (ds < 0 || (int)size < 0) kernel_error(b, "__memcpy direction/size");
  uint8_t *d = operand(b, dst, size, ds, "__memcpy dst"), *s = operand(b, src, size, ss, "__memcpy src");
  memmove(d, s, size);
  charge_dma(b, size);
  (void)async;
}
void Z_bangZ_memcpy_strided(struct Z_bang_instance_t *b, u32 dst, u32 src, u32 size, u32 dir, u32 dstr, u32 sstr,
                            u32 seg, u32 async) {
  int ds, ss; dir_spaces((int)dir, &ds, &ss);
  if (ds < 0 || (int)size < 0 || (int)seg < 0) kernel_error(b, "__memcpy direction/size");
  for (uint32_t i = 0; i <= seg; i++) {
    uint64_t dof = (uint64_t)dst + (uint64_t)(int64_t)(int)dstr * i, sof = (uint64_t)src + (uint64_t)(int64_t)(int)sstr * i;
    if (dof > 0xffffffffu || sof > 0xffffffffu) kernel_error(b, "__memcpy stride overflow");
    memmove(operand(b, (u32)dof, size, ds, "__memcpy dst"), operand(b, (u32)sof, size, ss, "__memcpy src"), size);
  }
  charge_dma(b, (uint64_t)size * (seg + 1));
  (void)async;
}
void Z_bangZ_transpose(struct Z_bang_instance_t *b, u32 d, u32 s, u32 h, u32 w, u32 es) { kernel_error(b, "transpose: not in spike"); }
void Z_bangZ_write_zero(struct Z_bang_instance_t *b, u32 d, u32 bytes) {
  memset(operand(b, d, bytes, SP_NRAM, "__bang_write_zero"), 0, bytes);
  b->clock_cycles += bytes / 128.0;
}
void Z_bangZ_add_f32(struct Z_bang_instance_t *b, u32 d, u32 x, u32 y, u32 n) {
  float *D = (float *)operand(b, d, 4ull * n, SP_NRAM, "dst"), *X = (float *)operand(b, x, 4ull * n, SP_NRAM, "src0"),
        *Y = (float *)operand(b, y, 4ull * n, SP_NRAM, "src1");
  for (uint32_t i = 0; i < n; i++) D[i] = X[i] + Y[i];
  b->vector_elems += n; b->clock_cycles += 30 + n / 32.0;
}
void Z_bangZ_matmul_f32(struct Z_bang_instance_t *b, u32 d, u32 l, u32 r, u32 M, u32 K, u32 N) { kernel_error(b, "matmul: not in spike"); }
static inline float sigmoid_hw(float x) {
  if (x <= -7.75f) return 0.0f;
  if (x >= 7.75f) return 1.0f;
  return 1.0f / (1.0f + expf(-x));
}
void Z_bangZ_active_sigmoid_f32(struct Z_bang_instance_t *b, u32 d, u32 s, u32 n) {
  if ((int)n < 0) kernel_error(b, "n < 0");
  float *D = (float *)operand(b, d, 4ull * n, SP_NRAM, "__bang_active_sigmoid dst");
  const float *S = (const float *)operand(b, s, 4ull * n, SP_NRAM, "__bang_active_sigmoid src");
  for (uint32_t i = 0; i < n; i++) D[i] = sigmoid_hw(S[i]);
  b->vector_elems += n; b->builtin_calls++; b->clock_cycles += 30 + n / 16.0;
}
void Z_bangZ_sync(struct Z_bang_instance_t *b, u32 which) {
  if (which >= 1 && g_ncores > 1) pthread_barrier_wait(&g_cluster_barrier);
  b->clock_cycles += 50;
}
void Z_bangZ_mul_scalar_f32(struct Z_bang_instance_t *b, u32 d, u32 s, f32 v, u32 n) { kernel_error(b, "nyi"); }
void Z_bangZ_printf_i(struct Z_bang_instance_t *b, u32 f, u64 v) { printf("kernel printf %llu\n", (unsigned long long)v); }

/* ---- instrumented build: binaryen --instrument-memory hooks (module "env"). Each scalar access of kernel code
 * reports its effective address; the host counts it by space (the cost model's scalar_load[space]). ---- */
static __thread struct Z_bang_instance_t *t_core;
u32 Z_envZ_load_ptr(struct Z_env_instance_t *e, u32 id, u32 bytes, u32 offset, u32 addr) {
  t_core->loads[space_of(addr + offset)]++;
  return addr;
}
u32 Z_envZ_store_ptr(struct Z_env_instance_t *e, u32 id, u32 bytes, u32 offset, u32 addr) {
  t_core->stores[space_of(addr + offset)]++;
  return addr;
}
u32 Z_envZ_load_val_i32(struct Z_env_instance_t *e, u32 id, u32 v) { return v; }
u64 Z_envZ_load_val_i64(struct Z_env_instance_t *e, u32 id, u64 v) { return v; }
f32 Z_envZ_load_val_f32(struct Z_env_instance_t *e, u32 id, f32 v) { return v; }
f64 Z_envZ_load_val_f64(struct Z_env_instance_t *e, u32 id, f64 v) { return v; }
u32 Z_envZ_store_val_i32(struct Z_env_instance_t *e, u32 id, u32 v) { return v; }
u64 Z_envZ_store_val_i64(struct Z_env_instance_t *e, u32 id, u64 v) { return v; }
f32 Z_envZ_store_val_f32(struct Z_env_instance_t *e, u32 id, f32 v) { return v; }
f64 Z_envZ_store_val_f64(struct Z_env_instance_t *e, u32 id, f64 v) { return v; }
wasm_rt_memory_t *Z_envZ_memory(struct Z_env_instance_t *e) { return &g_mem; } /* the imported memory */

static struct Z_bang_instance_t *new_core(int core, int ncores, uint32_t stack_top) {
  struct Z_bang_instance_t *b = calloc(1, sizeof *b);
  b->core = core;
  int v[12] = {core, 0, 0, ncores, 1, 1, core, ncores, ncores > 1 ? core : 0, ncores > 1 ? 4 : 1, 0, ncores > 1 ? 1 : 0};
  memcpy(b->vars, v, sizeof v);
  Z_kernels_instantiate(&b->inst, b, &g_env);
  /* each core its own stack: the instance's own __stack_pointer global (not in linear memory) */
  *Z_kernelsZ___stack_pointer(&b->inst) = stack_top;
  return b;
}
static double now(void) { struct timespec t; clock_gettime(getenv("WALL") ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

typedef struct { struct Z_bang_instance_t *b; int what; u32 a, bb, c, p, M, K, N; wasm_rt_trap_t trap; u64 addr64; } Job;
static void *run_job(void *arg) {
  Job *j = arg;
  t_core = j->b;

  j->trap = wasm_rt_impl_try();
  if (j->trap == WASM_RT_TRAP_NONE) {
    if (j->what == 0) Z_kernelsZ_sig_f32(&j->b->inst, j->a, j->bb, (u64)j->M);
    else if (j->what == 1) Z_kernelsZ_mm_scalar_f32(&j->b->inst, j->a, j->bb, j->c, j->M, j->K, j->N);
#ifdef HAVE_ATTACK
    else if (j->what == 3) Z_kernelsZ_attack(&j->b->inst, j->a, j->addr64);
#endif
#ifdef HAVE_MC
    else if (j->what == 2) Z_kernelsZ_mc_reduce(&j->b->inst, j->a, j->bb, j->M);
#endif
  }

  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "sig";
  wasm_rt_init();
  /* GDRAM: 64 MiB .. 64 MiB + 64 MiB; the memory declares max 4 GiB, so every 32-bit address is either in the
   * reservation (guard pages trap above the current size) or inside the module's own memory */
  uint32_t pages = (GDRAM_BASE + 64 * MiB) / 65536;
  wasm_rt_allocate_memory(&g_mem, pages, 65536);
  g_gdram_end = GDRAM_BASE + 64 * MiB;
  Z_kernels_init_module();
  const int N = 1 << 20, S = 256;
  float *hx = malloc(4 * N);
  for (int i = 0; i < N; i++) hx[i] = (float)((i % 2001) - 1000) / 100.0f;
  u32 X = GDRAM_BASE, Y = GDRAM_BASE + 4 * N, A = GDRAM_BASE + 8 * N, B = A + 4 * S * S, C = B + 4 * S * S;
  memcpy(g_mem.data + X, hx, 4 * N);
  memcpy(g_mem.data + A, hx, 4 * S * S);
  memcpy(g_mem.data + B, hx + 5, 4 * S * S);
  int reps = argc > 2 ? atoi(argv[2]) : 5;
  if (!strcmp(mode, "sig") || !strcmp(mode, "mm")) {
    int what = !strcmp(mode, "mm");
    for (int r = 0; r < reps; r++) {
      double t0 = now();
      struct Z_bang_instance_t *b = new_core(0, 1, 256 * KiB);
      double t1 = now();
      Job j = {b, what, what ? A : X, what ? B : Y, C, 0, what ? S : N, S, S, 0};
      run_job(&j);
      double t2 = now();
      printf("%s: instantiate %.3f ms, run %.3f ms, trap=%d, modelled %.0f cycles, dma %llu B, vec %llu, "
             "loads g/n/stack %llu/%llu/%llu stores %llu/%llu/%llu\n",
             mode, 1e3 * (t1 - t0), 1e3 * (t2 - t1), j.trap, b->clock_cycles, b->dma_bytes, b->vector_elems,
             b->loads[SP_GDRAM], b->loads[SP_NRAM], b->loads[SP_STACK], b->stores[SP_GDRAM], b->stores[SP_NRAM],
             b->stores[SP_STACK]);
#ifdef HAVE_CNT
      printf("   in-wasm counters (globals): loads gdram/onchip/other %llu/%llu/%llu stores %llu/%llu/%llu\n",
             (unsigned long long)*Z_kernelsZ___cnt_ld_gdram(&b->inst), (unsigned long long)*Z_kernelsZ___cnt_ld_onchip(&b->inst),
             (unsigned long long)*Z_kernelsZ___cnt_ld_other(&b->inst), (unsigned long long)*Z_kernelsZ___cnt_st_gdram(&b->inst),
             (unsigned long long)*Z_kernelsZ___cnt_st_onchip(&b->inst), (unsigned long long)*Z_kernelsZ___cnt_st_other(&b->inst));
#endif
      Z_kernels_free(&b->inst); free(b);
    }
    if (!strcmp(mode, "sig")) {
      double err = 0; const float *y = (const float *)(g_mem.data + Y);
      for (int i = 0; i < N; i++) { double r = hx[i] <= -7.75f ? 0 : hx[i] >= 7.75f ? 1 : 1 / (1 + exp(-(double)hx[i])); err = fmax(err, fabs(r - y[i])); }
      printf("sigmoid max abs err vs float64: %.3g\n", err);
    } else {
      const float *c = (const float *)(g_mem.data + C), *a = (const float *)(g_mem.data + A), *bb = (const float *)(g_mem.data + B);
      double err = 0;
      for (int i = 0; i < S; i += 37) for (int jj = 0; jj < S; jj += 41) { double s = 0; for (int k = 0; k < S; k++) s += (double)a[i * S + k] * bb[k * S + jj]; err = fmax(err, fabs(s - c[i * S + jj]) / (1 + fabs(s))); }
      printf("matmul c[0..3] %.6f %.6f %.6f %.6f, max rel err (sampled) %.3g\n", c[0], c[1], c[2], c[3], err);
    }
  }
#ifdef HAVE_ATTACK
  if (!strcmp(mode, "attack")) {
    /* the host's clock: a C object outside linear memory. Hand its address to the kernel as an integer. */
    struct Z_bang_instance_t *b = new_core(0, 1, 256 * KiB);
    uint64_t host_addr = (uint64_t)(uintptr_t)&b->clock_cycles;
    for (int k = 0; k < 8; k++) {
      double before = b->clock_cycles;
      Job j = {b, 3, (u32)k, 0, 0, 0, 0, 0, 0, 0, host_addr};
      run_job(&j);
      printf("attack %d: trap=%d (1=OOB 5=unreachable) host clock before %.0f after %.0f  (&clock=%p, mem=%p..+%llu)\n", k,
             j.trap, before, b->clock_cycles, (void *)&b->clock_cycles, (void *)g_mem.data, (unsigned long long)g_mem.size);
      *Z_kernelsZ___stack_pointer(&b->inst) = 256 * KiB;
    }
  }
#endif
#ifdef HAVE_MC
  if (!strcmp(mode, "mc")) {
    /* 4 cores of one cluster: one instance each over the same imported memory, own stack and own NRAM, real
     * threads, __sync_cluster = a host barrier. Kernel: each core writes its partial sums into SRAM, barrier,
     * core 0 reduces them. */
    g_ncores = 4;
    pthread_barrier_init(&g_cluster_barrier, NULL, 4);
    for (int r = 0; r < reps; r++) {
      pthread_t th[4]; Job jobs[4];
      double t0 = now();
      for (int c = 0; c < 4; c++) {
        g_cores[c] = new_core(c, 4, (256 - 64 * c) * KiB);
        jobs[c] = (Job){g_cores[c], 2, X, Y, 0, 0, N, 0, 0, 0};
      }
      for (int c = 0; c < 4; c++) pthread_create(&th[c], NULL, run_job, &jobs[c]);
      for (int c = 0; c < 4; c++) pthread_join(th[c], NULL);
      double t1 = now();
      double s = 0; for (int i = 0; i < N; i++) s += hx[i];
      printf("mc: 4 cores %.3f ms traps %d %d %d %d; sum %.3f (float64 %.3f); clocks %.0f %.0f %.0f %.0f\n", 1e3 * (t1 - t0),
             jobs[0].trap, jobs[1].trap, jobs[2].trap, jobs[3].trap, ((float *)(g_mem.data + Y))[0], s,
             g_cores[0]->clock_cycles, g_cores[1]->clock_cycles, g_cores[2]->clock_cycles, g_cores[3]->clock_cycles);
      for (int c = 0; c < 4; c++) { Z_kernels_free(&g_cores[c]->inst); free(g_cores[c]); }
    }
  }
#endif
  return 0;
}
