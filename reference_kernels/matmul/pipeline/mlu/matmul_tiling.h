// Tiling shared by the __bang_matmul stages (vector, multicore, pipeline, sram_union).
//
// __bang_matmul(dst[M][Np], lhs[M][Kp] in NRAM, rhs in WRAM, M, Kp, Np) takes its right operand as
// Np rows of Kp ("column-major right matrix": the Cambricon guide's wording and mlu-ops' practice), with
// Kp a multiple of 16 floats (64 B) and Np a multiple of 64; M needs no padding. b arrives row-major
// [K][N], so every rhs tile is transposed on the way into WRAM and zero padded. K and N are cut into tiles
// that fit WRAM; M into row tiles that fit NRAM. Padding columns of lhs are kept at zero so padded
// products add nothing.
//
// The published evidence on that layout conflicts (the AICS lab copies b unchanged, and its loose check
// cannot tell), so it is one switch: build with -DMATMUL_RHS_N_ROWS=0 for Kp rows of Np (b as it is).
#ifndef REFERENCE_MATMUL_TILING_H_
#define REFERENCE_MATMUL_TILING_H_

#include "bang_utils.h"

#define MATMUL_K_ALIGN 16
#define MATMUL_N_ALIGN 64
#define MATMUL_K_TILE_MAX 512
#define MATMUL_N_TILE_MAX 256
#define MATMUL_M_TILE_MAX 256
// rhs tiles are transposed in NRAM this many columns of b at a time.
#define TRANSPOSE_CHUNK_N 64
#ifndef MATMUL_RHS_N_ROWS
#define MATMUL_RHS_N_ROWS 1
#endif

struct MatmulTiles {
  int k_tile;   // K step; a multiple of MATMUL_K_ALIGN, so a full k tile needs no padding
  int n_tile;   // N step; a multiple of MATMUL_N_ALIGN
  int k_tiles;  // CEIL_DIV(K, k_tile)
  int n_tiles;
};

// Balanced tiles: K = 520 gives two k tiles of 272 and 248 rather than 512 and 8.
__mlu_func__ MatmulTiles plan_matmul_tiles(int K, int N) {
  MatmulTiles t;
  const int k_count = CEIL_DIV(K, MATMUL_K_TILE_MAX);
  const int n_count = CEIL_DIV(N, MATMUL_N_TILE_MAX);
  t.k_tile = CEIL_ALIGN(CEIL_DIV(K, k_count), MATMUL_K_ALIGN);
  t.n_tile = CEIL_ALIGN(CEIL_DIV(N, n_count), MATMUL_N_ALIGN);
  t.k_tiles = CEIL_DIV(K, t.k_tile);
  t.n_tiles = CEIL_DIV(N, t.n_tile);
  return t;
}

// One (k, n) tile of b: rows k0..k0+kt, columns n0..n0+nt; padded sizes ktp and ntp.
struct RhsTile {
  int k0, kt, ktp;
  int n0, nt, ntp;
};

__mlu_func__ RhsTile rhs_tile_at(const MatmulTiles& t, int K, int N, int k_index, int n_index) {
  RhsTile r;
  r.k0 = k_index * t.k_tile;
  r.kt = MIN(t.k_tile, K - r.k0);
  r.ktp = CEIL_ALIGN(r.kt, MATMUL_K_ALIGN);
  r.n0 = n_index * t.n_tile;
  r.nt = MIN(t.n_tile, N - r.n0);
  r.ntp = CEIL_ALIGN(r.nt, MATMUL_N_ALIGN);
  return r;
}

// NRAM floats stage_rhs_tile needs as scratch.
__mlu_func__ int rhs_stage_floats(const MatmulTiles& t) { return 2 * t.k_tile * TRANSPOSE_CHUNK_N; }

// Writes b[k0:k0+kt, n0:n0+nt] zero padded in the rhs layout (see the top) to dst (WRAM, or SRAM for a
// cluster-shared copy). stage: rhs_stage_floats() floats of NRAM scratch.
__mlu_func__ void stage_rhs_tile(float* dst, mluMemcpyDirection_t dst_dir, const float* b, int N,
                                     const RhsTile& r, float* stage) {
  float* rows = stage;                               // [ktp][64]: a 64-column slice of b
  float* cols = stage + r.ktp * TRANSPOSE_CHUNK_N;   // [64][ktp]: the same slice transposed
  for (int c0 = 0; c0 < r.ntp; c0 += TRANSPOSE_CHUNK_N) {
    const int nc = MIN(TRANSPOSE_CHUNK_N, r.nt - c0);
    if (nc < TRANSPOSE_CHUNK_N || r.kt < r.ktp) {
      __bang_write_zero(rows, r.ktp * TRANSPOSE_CHUNK_N);
    }
    __memcpy(rows, b + (int64_t)r.k0 * N + r.n0 + c0, nc * sizeof(float), GDRAM2NRAM,
             TRANSPOSE_CHUNK_N * sizeof(float), N * sizeof(float), r.kt - 1);
#if MATMUL_RHS_N_ROWS
    __bang_transpose(cols, rows, r.ktp, TRANSPOSE_CHUNK_N);
    __memcpy(dst + c0 * r.ktp, cols, TRANSPOSE_CHUNK_N * r.ktp * sizeof(float), dst_dir);
#else
    (void)cols;
    __memcpy(dst + c0, rows, TRANSPOSE_CHUNK_N * sizeof(float), dst_dir, r.ntp * sizeof(float),
             TRANSPOSE_CHUNK_N * sizeof(float), r.ktp - 1);
#endif
  }
}

// Rows per M tile so that fixed_floats plus, per row, lhs_buffers k tiles and out_buffers n tiles fit
// in budget_floats; at least 1, at most MATMUL_M_TILE_MAX.
__mlu_func__ int plan_m_tile(const MatmulTiles& t, int budget_floats, int fixed_floats, int lhs_buffers,
                             int out_buffers) {
  const int per_row = lhs_buffers * t.k_tile + out_buffers * t.n_tile;
  return MAX(1, MIN(MATMUL_M_TILE_MAX, (budget_floats - fixed_floats) / per_row));
}

// Rows per tile for `rows` rows and tiles of at most max_tile: the fewest tiles, equal to within one row,
// so no pipeline step carries a sliver (1024 rows, at most 170: 7 x 147 rather than 6 x 170 + 4).
__mlu_func__ int balanced_tile(int64_t rows, int max_tile) {
  if (rows <= max_tile) return (int)MAX((int64_t)1, rows);
  return (int)CEIL_DIV(rows, CEIL_DIV(rows, (int64_t)max_tile));
}

// c[m_begin:m_end, :] = a[m_begin:m_end, :] x b with synchronous copies: for each rhs tile in WRAM,
// every row tile is loaded, multiplied, added to what earlier k tiles left in c, and stored.
// nram: NRAM_BUDGET_BYTES of scratch; wram: WRAM_BUDGET_BYTES.
__mlu_func__ void matmul_rows_sync(const float* a, const float* b, float* c, int64_t m_begin,
                                   int64_t m_end, int K, int N, float* nram, float* wram) {
  const MatmulTiles t = plan_matmul_tiles(K, N);
  const int stage_floats = rhs_stage_floats(t);
  const int out_buffers = t.k_tiles > 1 ? 2 : 1;  // the partial buffer only when K is tiled
  const int m_tile = balanced_tile(m_end - m_begin, plan_m_tile(t, NRAM_BUDGET_BYTES / sizeof(float),
                                                                  stage_floats, 1, out_buffers));
  float* stage = nram;
  float* lhs = stage + stage_floats;
  float* acc = lhs + m_tile * t.k_tile;
  float* partial = acc + m_tile * t.n_tile;

  for (int n_index = 0; n_index < t.n_tiles; ++n_index) {
    for (int k_index = 0; k_index < t.k_tiles; ++k_index) {
      const RhsTile r = rhs_tile_at(t, K, N, k_index, n_index);
      stage_rhs_tile(wram, NRAM2WRAM, b, N, r, stage);
      if (r.kt < r.ktp) __bang_write_zero(lhs, m_tile * r.ktp);
      for (int64_t m0 = m_begin; m0 < m_end; m0 += m_tile) {
        const int mt = (int)MIN((int64_t)m_tile, m_end - m0);
        __memcpy(lhs, a + m0 * K + r.k0, r.kt * sizeof(float), GDRAM2NRAM, r.ktp * sizeof(float),
                 K * sizeof(float), mt - 1);
        __bang_matmul(acc, lhs, wram, mt, r.ktp, r.ntp);
        if (k_index > 0) {
          __memcpy(partial, c + m0 * N + r.n0, r.nt * sizeof(float), GDRAM2NRAM,
                   r.ntp * sizeof(float), N * sizeof(float), mt - 1);
          __bang_add(acc, acc, partial, mt * r.ntp);
        }
        __memcpy(c + m0 * N + r.n0, acc, r.nt * sizeof(float), NRAM2GDRAM, N * sizeof(float),
                 r.ntp * sizeof(float), mt - 1);
      }
    }
  }
}

// NRAM buffers of the double-buffered row pipeline (the pipeline and sram_union stages).
struct RowPipeline {
  int m_tile;
  float* lhs[2];
  float* acc[2];
  float* partial[2];  // earlier k tiles' result, read back from c (only used when K is tiled)
};

// Carves the pipeline's buffers out of nram (budget_floats floats) for `rows` rows.
__mlu_func__ RowPipeline plan_row_pipeline(const MatmulTiles& t, float* nram, int budget_floats,
                                           int64_t rows) {
  RowPipeline p;
  const int out_buffers = t.k_tiles > 1 ? 4 : 2;
  p.m_tile = balanced_tile(rows, plan_m_tile(t, budget_floats, 0, 2, out_buffers));
  for (int i = 0; i < 2; ++i) {
    p.lhs[i] = nram + i * p.m_tile * t.k_tile;
    p.acc[i] = nram + 2 * p.m_tile * t.k_tile + i * p.m_tile * t.n_tile;
    p.partial[i] = nram + 2 * p.m_tile * t.k_tile + (2 + i) * p.m_tile * t.n_tile;
  }
  return p;
}

// c[m_begin:m_end, n tile of r] (+)= a[m_begin:m_end, k tile of r] x rhs tile r (already in wram), as a
// three-stage software pipeline over row tiles: load tile i (async GDRAM2NRAM), multiply tile i-1, store
// tile i-2 (async NRAM2GDRAM). Each step ends with __sync_io() + __sync_compute(), since the next step
// reads what this one's copies and __bang_matmul produced. accumulate: add what earlier k tiles left in c
// (this task's own rows; the pipeline drains before returning, so those stores are complete).
__mlu_func__ void pipeline_rows(const float* a, float* c, int64_t m_begin, int64_t m_end, int K, int N,
                                const RhsTile& r, bool accumulate, const RowPipeline& p, const float* wram) {
  const int m_tile = p.m_tile;
  const int64_t row_tiles = CEIL_DIV(m_end - m_begin, (int64_t)m_tile);
  if (r.kt < r.ktp) {  // padding columns must be zero; the loads below never touch them
    __bang_write_zero(p.lhs[0], m_tile * r.ktp);
    __bang_write_zero(p.lhs[1], m_tile * r.ktp);
    __sync_compute();
  }
  for (int64_t step = 0; step < row_tiles + 2; ++step) {
    if (step >= 2) {  // store row tile step-2
      const int64_t m0 = m_begin + (step - 2) * m_tile;
      const int mt = (int)MIN((int64_t)m_tile, m_end - m0);
      __memcpy_async(c + m0 * N + r.n0, p.acc[step % 2], r.nt * sizeof(float), NRAM2GDRAM, N * sizeof(float),
                     r.ntp * sizeof(float), mt - 1);
    }
    if (step >= 1 && step <= row_tiles) {  // multiply row tile step-1
      const int64_t m0 = m_begin + (step - 1) * m_tile;
      const int mt = (int)MIN((int64_t)m_tile, m_end - m0);
      const int slot = (step - 1) % 2;
      __bang_matmul(p.acc[slot], p.lhs[slot], wram, mt, r.ktp, r.ntp);
      if (accumulate) __bang_add(p.acc[slot], p.acc[slot], p.partial[slot], mt * r.ntp);
    }
    if (step < row_tiles) {  // load row tile step (and what earlier k tiles left in c)
      const int64_t m0 = m_begin + step * m_tile;
      const int mt = (int)MIN((int64_t)m_tile, m_end - m0);
      __memcpy_async(p.lhs[step % 2], a + m0 * K + r.k0, r.kt * sizeof(float), GDRAM2NRAM,
                     r.ktp * sizeof(float), K * sizeof(float), mt - 1);
      if (accumulate) {
        __memcpy_async(p.partial[step % 2], c + m0 * N + r.n0, r.nt * sizeof(float), GDRAM2NRAM,
                       r.ntp * sizeof(float), N * sizeof(float), mt - 1);
      }
    }
    __sync_io();
    __sync_compute();
  }
}

#endif  // REFERENCE_MATMUL_TILING_H_
