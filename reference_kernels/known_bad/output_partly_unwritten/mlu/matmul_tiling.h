// Tiling shared by the __bang_matmul stages (vector, multicore, pipeline, sram_union), for T = float or half.
//
// __bang_matmul(dst[M][Np] fp32, lhs[M][Kp] in NRAM, rhs in WRAM, M, Kp, Np) takes its right operand as
// Np rows of Kp ("column-major right matrix": the Cambricon guide's wording) in the tensor unit's weight-line
// order, the one __bang_reshape_filter writes: column n in line n % 64, slot n / 64, i.e. row
// (n % 64) * (Np / 64) + n / 64 (mlu-ops' FFT reshapes its right matrix so before every __bang_matmul). Kp *
// sizeof(T) is a multiple of 64 B (16 floats, 32 halves) and Np a multiple of 64; M needs no padding. b
// arrives row-major [K][N], so every rhs tile is transposed on the way into WRAM, zero padded, and each
// 64-column slot is scattered to its lines by the copy's stride. K and N are cut into tiles that fit WRAM; M
// into row tiles that fit NRAM. Padding columns of lhs are kept at zero so padded products add nothing.
//
// fp16 uses the half x half -> float overload: products accumulate in fp32 and each result is rounded to
// fp16 once, on its way out (__bang_float2half_rn). Results of earlier k tiles are kept in fp32 in
// `partial` (GDRAM): c itself for fp32, an M x N float workspace for fp16, since rounding a running sum to
// fp16 at every k tile would throw away what the tensor unit kept.
//
// The AICS lab copies b unchanged (its loose check cannot tell), so the layout is one switch: build with
// -DMATMUL_RHS_N_ROWS=0 for Kp rows of Np (b as it is; the emulator's BANG_EMU_MATMUL_RHS=kn).
#ifndef REFERENCE_MATMUL_TILING_H_
#define REFERENCE_MATMUL_TILING_H_

#include "bang_utils.h"

#define MATMUL_K_ALIGN_BYTES 64
#define MATMUL_N_ALIGN 64
#define MATMUL_K_TILE_MAX_BYTES 2048  // 512 floats, 1024 halves
#define MATMUL_N_TILE_MAX 256
#define MATMUL_M_TILE_MAX 256
// The largest rhs tile, in bytes: what WRAM (or the SRAM copy) must hold.
#define MATMUL_RHS_TILE_MAX_BYTES (MATMUL_K_TILE_MAX_BYTES * MATMUL_N_TILE_MAX)
// rhs tiles are transposed in NRAM this many columns of b at a time.
#define TRANSPOSE_CHUNK_N 64
#ifndef MATMUL_RHS_N_ROWS
#define MATMUL_RHS_N_ROWS 1
#endif

struct MatmulTiles {
  int k_align;  // elements per 64 B
  int k_tile;   // K step; a multiple of k_align, so a full k tile needs no padding
  int n_tile;   // N step; a multiple of MATMUL_N_ALIGN
  int k_tiles;  // CEIL_DIV(K, k_tile)
  int n_tiles;
};

// Balanced tiles: fp32 K = 520 gives two k tiles of 272 and 248 rather than 512 and 8.
template <typename T>
__mlu_func__ MatmulTiles plan_matmul_tiles(int K, int N) {
  MatmulTiles t;
  t.k_align = MATMUL_K_ALIGN_BYTES / (int)sizeof(T);
  const int k_count = CEIL_DIV(K, MATMUL_K_TILE_MAX_BYTES / (int)sizeof(T));
  const int n_count = CEIL_DIV(N, MATMUL_N_TILE_MAX);
  t.k_tile = CEIL_ALIGN(CEIL_DIV(K, k_count), t.k_align);
  t.n_tile = CEIL_ALIGN(CEIL_DIV(N, n_count), MATMUL_N_ALIGN);
  t.k_tiles = CEIL_DIV(K, t.k_tile);
  t.n_tiles = CEIL_DIV(N, t.n_tile);
  return t;
}

// One (k, n) tile of b: rows k0..k0+kt, columns n0..n0+nt; padded sizes ktp and ntp.
struct RhsTile {
  int k0, kt, ktp;
  int n0, nt, ntp;
  bool first_k, last_k;  // the first / last k tile of its n tile
};

__mlu_func__ RhsTile rhs_tile_at(const MatmulTiles& t, int K, int N, int k_index, int n_index) {
  RhsTile r;
  r.k0 = k_index * t.k_tile;
  r.kt = MIN(t.k_tile, K - r.k0);
  r.ktp = CEIL_ALIGN(r.kt, t.k_align);
  r.n0 = n_index * t.n_tile;
  r.nt = MIN(t.n_tile, N - r.n0);
  r.ntp = CEIL_ALIGN(r.nt, MATMUL_N_ALIGN);
  r.first_k = k_index == 0;
  r.last_k = k_index == t.k_tiles - 1;
  return r;
}

// NRAM bytes stage_rhs_tile needs as scratch.
template <typename T>
__mlu_func__ int rhs_stage_bytes(const MatmulTiles& t) { return 2 * t.k_tile * TRANSPOSE_CHUNK_N * (int)sizeof(T); }

// Writes b[k0:k0+kt, n0:n0+nt] zero padded in the rhs layout (see the top) to dst (WRAM, or SRAM for a
// cluster-shared copy). stage: rhs_stage_bytes<T>() bytes of NRAM scratch.
template <typename T>
__mlu_func__ void stage_rhs_tile(T* dst, mluMemcpyDirection_t dst_dir, const T* b, int N, const RhsTile& r,
                                 T* stage) {
  T* rows = stage;                               // [ktp][64]: a 64-column slice of b
  T* cols = stage + r.ktp * TRANSPOSE_CHUNK_N;   // [64][ktp]: the same slice transposed
  for (int c0 = 0; c0 < r.ntp; c0 += TRANSPOSE_CHUNK_N) {
    const int nc = MIN(TRANSPOSE_CHUNK_N, r.nt - c0);
    if (nc < TRANSPOSE_CHUNK_N || r.kt < r.ktp) {
      __bang_write_zero(rows, r.ktp * TRANSPOSE_CHUNK_N);
    }
    __memcpy(rows, b + (int64_t)r.k0 * N + r.n0 + c0, nc * sizeof(T), GDRAM2NRAM,
             TRANSPOSE_CHUNK_N * sizeof(T), N * sizeof(T), r.kt - 1);
#if MATMUL_RHS_N_ROWS
    // the chunk is slot c0 / 64 of lines 0..63: its row j goes to row j * slots + c0 / 64
    const int slots = r.ntp / TRANSPOSE_CHUNK_N;
    __bang_transpose(cols, rows, r.ktp, TRANSPOSE_CHUNK_N);
    __memcpy(dst + (c0 / TRANSPOSE_CHUNK_N) * r.ktp, cols, r.ktp * sizeof(T), dst_dir, slots * r.ktp * sizeof(T),
             r.ktp * sizeof(T), TRANSPOSE_CHUNK_N - 1);
#else
    (void)cols;
    __memcpy(dst + c0, rows, TRANSPOSE_CHUNK_N * sizeof(T), dst_dir, r.ntp * sizeof(T),
             TRANSPOSE_CHUNK_N * sizeof(T), r.ktp - 1);
#endif
  }
}

// NRAM bytes per row of a row tile: lhs_buffers k tiles of T, acc_buffers fp32 result tiles and, for
// fp16, as many fp16 copies of the results as there are result buffers (the fp32 ones are their own).
template <typename T>
__mlu_func__ int row_bytes(const MatmulTiles& t, int lhs_buffers, int acc_buffers, int out_buffers) {
  const int rounded = sizeof(T) == sizeof(float) ? 0 : out_buffers * t.n_tile * (int)sizeof(T);
  return lhs_buffers * t.k_tile * (int)sizeof(T) + acc_buffers * t.n_tile * (int)sizeof(float) + rounded;
}

// Rows per M tile so that fixed_bytes plus `rows` rows of per_row bytes fit in budget_bytes; at least 1, at
// most MATMUL_M_TILE_MAX.
__mlu_func__ int plan_m_tile(int budget_bytes, int fixed_bytes, int per_row_bytes) {
  return MAX(1, MIN(MATMUL_M_TILE_MAX, (budget_bytes - fixed_bytes) / per_row_bytes));
}

// Rows per tile for `rows` rows and tiles of at most max_tile: the fewest tiles, equal to within one row,
// so no pipeline step carries a sliver (1024 rows, at most 170: 7 x 147 rather than 6 x 170 + 4).
__mlu_func__ int balanced_tile(int64_t rows, int max_tile) {
  if (rows <= max_tile) return (int)MAX((int64_t)1, rows);
  return (int)CEIL_DIV(rows, CEIL_DIV(rows, (int64_t)max_tile));
}

// c[m_begin:m_end, :] = a[m_begin:m_end, :] x b with synchronous copies: for each rhs tile in WRAM,
// every row tile is loaded, multiplied, added to what earlier k tiles left in partial, and stored (to
// partial, or to c in c's type after the last k tile). nram: NRAM_BUDGET_BYTES of scratch; wram:
// WRAM_BUDGET_BYTES.
template <typename T>
__mlu_func__ void matmul_rows_sync(const T* a, const T* b, T* c, float* partial, int64_t m_begin, int64_t m_end,
                                   int K, int N, char* nram, T* wram) {
  const MatmulTiles t = plan_matmul_tiles<T>(K, N);
  const int stage_bytes = rhs_stage_bytes<T>(t);
  const int acc_buffers = t.k_tiles > 1 ? 2 : 1;  // the partial buffer only when K is tiled
  const int m_tile = balanced_tile(m_end - m_begin,
                                   plan_m_tile(NRAM_BUDGET_BYTES, stage_bytes, row_bytes<T>(t, 1, acc_buffers, 1)));
  T* stage = (T*)nram;
  T* lhs = (T*)(nram + stage_bytes);
  float* acc = (float*)(lhs + m_tile * t.k_tile);
  float* earlier = acc + m_tile * t.n_tile;
  T* rounded = (T*)(earlier + (acc_buffers - 1) * m_tile * t.n_tile);

  for (int n_index = 0; n_index < t.n_tiles; ++n_index) {
    for (int k_index = 0; k_index < t.k_tiles; ++k_index) {
      const RhsTile r = rhs_tile_at(t, K, N, k_index, n_index);
      stage_rhs_tile(wram, NRAM2WRAM, b, N, r, stage);
      if (r.kt < r.ktp) __bang_write_zero(lhs, m_tile * r.ktp);
      for (int64_t m0 = m_begin; m0 < m_end; m0 += m_tile) {
        const int mt = (int)MIN((int64_t)m_tile, m_end - m0);
        __memcpy(lhs, a + m0 * K + r.k0, r.kt * sizeof(T), GDRAM2NRAM, r.ktp * sizeof(T), K * sizeof(T), mt - 1);
        __bang_matmul(acc, lhs, wram, mt, r.ktp, r.ntp);
        if (!r.first_k) {
          __memcpy(earlier, partial + m0 * N + r.n0, r.nt * sizeof(float), GDRAM2NRAM,
                   r.ntp * sizeof(float), N * sizeof(float), mt - 1);
          __bang_add(acc, acc, earlier, mt * r.ntp);
        }
        if (r.last_k) {
          const T* result = result_in_output_type(c, acc, rounded, mt * r.ntp);
          __memcpy(c + m0 * N + r.n0, result, r.nt * sizeof(T), NRAM2GDRAM, N * sizeof(T), r.ntp * sizeof(T),
                   mt - 1);
        } else {
          __memcpy(partial + m0 * N + r.n0, acc, r.nt * sizeof(float), NRAM2GDRAM, N * sizeof(float),
                   r.ntp * sizeof(float), mt - 1);
        }
      }
    }
  }
}

// NRAM buffers of the double-buffered row pipeline (the pipeline and sram_union stages).
template <typename T>
struct RowPipeline {
  int m_tile;
  T* lhs[2];
  float* acc[2];
  float* earlier[2];  // earlier k tiles' result, read back from partial (only used when K is tiled)
  T* out[2];          // the result in c's type: acc itself for fp32, its fp16 rounding for fp16
};

// Carves the pipeline's buffers out of nram (budget_bytes bytes) for `rows` rows.
template <typename T>
__mlu_func__ RowPipeline<T> plan_row_pipeline(const MatmulTiles& t, char* nram, int budget_bytes, int64_t rows) {
  RowPipeline<T> p;
  const int acc_buffers = t.k_tiles > 1 ? 4 : 2;
  p.m_tile = balanced_tile(rows, plan_m_tile(budget_bytes, 0, row_bytes<T>(t, 2, acc_buffers, 2)));
  T* lhs = (T*)nram;
  float* acc = (float*)(lhs + 2 * p.m_tile * t.k_tile);
  T* rounded = (T*)(acc + acc_buffers * p.m_tile * t.n_tile);
  for (int i = 0; i < 2; ++i) {
    p.lhs[i] = lhs + i * p.m_tile * t.k_tile;
    p.acc[i] = acc + i * p.m_tile * t.n_tile;
    p.earlier[i] = acc + (2 + i) * p.m_tile * t.n_tile;
    p.out[i] = sizeof(T) == sizeof(float) ? (T*)p.acc[i] : rounded + i * p.m_tile * t.n_tile;
  }
  return p;
}

// c[m_begin:m_end, n tile of r] (+)= a[m_begin:m_end, k tile of r] x rhs tile r (already in wram), as a
// three-stage software pipeline over row tiles: load tile i (async GDRAM2NRAM), multiply tile i-1, store
// tile i-2 (async NRAM2GDRAM). Each step ends with __sync_io() + __sync_compute(), since the next step
// reads what this one's copies and __bang_matmul produced. Earlier k tiles' sums are read from partial
// (this task's own rows; the pipeline drains before returning, so those stores are complete); every k
// tile but the last stores its sums there, the last stores c in c's type.
template <typename T>
__mlu_func__ void pipeline_rows(const T* a, T* c, float* partial, int64_t m_begin, int64_t m_end, int K, int N,
                                const RhsTile& r, const RowPipeline<T>& p, const T* wram) {
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
      if (r.last_k) {
        __memcpy_async(c + m0 * N + r.n0, p.out[step % 2], r.nt * sizeof(T), NRAM2GDRAM, N * sizeof(T),
                       r.ntp * sizeof(T), mt - 1);
      } else {
        __memcpy_async(partial + m0 * N + r.n0, p.acc[step % 2], r.nt * sizeof(float), NRAM2GDRAM,
                       N * sizeof(float), r.ntp * sizeof(float), mt - 1);
      }
    }
    if (step >= 1 && step <= row_tiles) {  // multiply row tile step-1
      const int64_t m0 = m_begin + (step - 1) * m_tile;
      const int mt = (int)MIN((int64_t)m_tile, m_end - m0);
      const int slot = (step - 1) % 2;
      __bang_matmul(p.acc[slot], p.lhs[slot], wram, mt, r.ktp, r.ntp);
      if (!r.first_k) __bang_add(p.acc[slot], p.acc[slot], p.earlier[slot], mt * r.ntp);
      if (r.last_k) result_in_output_type(c, p.acc[slot], p.out[slot], mt * r.ntp);
    }
    if (step < row_tiles) {  // load row tile step (and what earlier k tiles left in partial)
      const int64_t m0 = m_begin + step * m_tile;
      const int mt = (int)MIN((int64_t)m_tile, m_end - m0);
      __memcpy_async(p.lhs[step % 2], a + m0 * K + r.k0, r.kt * sizeof(T), GDRAM2NRAM, r.ktp * sizeof(T),
                     K * sizeof(T), mt - 1);
      if (!r.first_k) {
        __memcpy_async(p.earlier[step % 2], partial + m0 * N + r.n0, r.nt * sizeof(float), GDRAM2NRAM,
                       r.ntp * sizeof(float), N * sizeof(float), mt - 1);
      }
    }
    __sync_io();
    __sync_compute();
  }
}

#endif  // REFERENCE_MATMUL_TILING_H_
