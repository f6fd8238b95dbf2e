#include "xl/compute/amx_products.h"

#include "xl/compute/blas.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace xl::compute {

#if defined(__x86_64__)
namespace {

// Linux keeps the tiles' 8 KB of state out of a process until it asks for them
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); the permission holds for all its threads.
constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;

bool cpu_has_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool tile = (d >> 24) & 1u, bf16 = (d >> 22) & 1u;
  if (!tile || !bf16) return false;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const bool os_state = ((lo >> 17) & 3u) == 3u;  // XTILECFG and XTILEDATA enabled by the kernel
  return os_state && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// Every tile 16 rows of 64 bytes: A tiles 16 x 32 bf16, B tiles 16 pairs of rows x 16 columns x 2
// (the pairs interleaved, as TDPBF16PS reads them), C tiles 16 x 16 fp32.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// GCC 12's _tile_loadconfig names only 8 bytes of the configuration as read, so the compiler may
// drop the stores to the rest: the instruction here reads the whole of it.
__attribute__((target("amx-tile"))) void configure_tiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.bytes_per_row[t] = 64, config.rows[t] = 16;
  __asm__ volatile("ldtilecfg %0" ::"m"(config));
}

constexpr int64_t kTile = 16, kTileK = 32;  // rows (and columns) of a tile; bf16 of K per tile
constexpr int64_t kTileWords = kTile * kTile;  // 32-bit words of a tile: 1 KB

int64_t tiles(int64_t n, int64_t per) { return (n + per - 1) / per; }
int64_t k_tiles(int64_t k) { return tiles(std::max<int64_t>(k, 1), kTileK); }  // at least one (k 0: zeros)

// GCC 12 takes the AVX-512 headers' deliberately undefined vectors for uninitialised ones (its bug
// 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// A 16 x 16 block of 32-bit words (pairs of bf16), rows `ld` bf16 apart, transposed into `out`
// (rows 16 words apart).
__attribute__((target("avx512f"))) void transpose_words(const uint16_t* in, int64_t ld, uint32_t* out) {
  __m512i r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(in + i * ld);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // Each 128-bit lane now holds its 4 x 4 block transposed; the lanes' blocks change places.
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
  }
  for (int j = 0; j < 16; ++j) _mm512_storeu_si512(out + j * 16, r[j]);
}

// 16 pairs of rows (rows 2p and 2p + 1 of `in`, rows `ld` bf16 apart, 16 bf16 each) interleaved:
// out word (p, j) = (in[2p][j], in[2p + 1][j]).
__attribute__((target("avx512f,avx512bw"))) void interleave_pairs(const uint16_t* in, int64_t ld, uint32_t* out) {
  // Lanes 2j and 2j + 1 take element j of the even row (0-15) and of the odd one (16-31).
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                         5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int p = 0; p < 16; ++p) {
    const __m256i even = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * p * ld));
    const __m256i odd = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + (2 * p + 1) * ld));
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(even), odd, 1);
    _mm512_storeu_si512(out + p * 16, _mm512_permutexvar_epi16(order, both));
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// op(X)[row, col] of a bf16 operand, zero outside rows x cols.
struct Operand {
  const uint16_t* x;
  int64_t ld;
  bool trans;
  int64_t rows, cols;  // of op(X)
  uint16_t at(int64_t r, int64_t c) const {
    if (r >= rows || c >= cols) return 0;
    return trans ? x[c * ld + r] : x[r * ld + c];
  }
  bool whole(int64_t r0, int64_t r_count, int64_t c0, int64_t c_count) const {
    return r0 + r_count <= rows && c0 + c_count <= cols;
  }
};

// A's tile (i, kk): rows 16i.. of op(A), its K columns 32kk.., as 16 rows of 32 bf16.
void pack_a_tile(const Operand& a, int64_t i, int64_t kk, uint16_t* out) {
  const int64_t r0 = i * kTile, c0 = kk * kTileK;
  if (!a.whole(r0, kTile, c0, kTileK)) {
    for (int64_t r = 0; r < kTile; ++r)
      for (int64_t c = 0; c < kTileK; ++c) out[r * kTileK + c] = a.at(r0 + r, c0 + c);
  } else if (!a.trans) {
    for (int64_t r = 0; r < kTile; ++r) std::memcpy(out + r * kTileK, a.x + (r0 + r) * a.ld + c0, 2 * kTileK);
  } else {  // A^T's rows c0 + 2p, c0 + 2p + 1 paired, then the words transposed
    alignas(64) uint32_t pairs[kTileWords];
    interleave_pairs(a.x + c0 * a.ld + r0, a.ld, pairs);
    transpose_words(reinterpret_cast<const uint16_t*>(pairs), 2 * kTile, reinterpret_cast<uint32_t*>(out));
  }
}

// B's tile (kk, j): op(B)'s K rows 32kk.. (16 pairs), columns 16j.., the pairs interleaved.
void pack_b_tile(const Operand& b, int64_t kk, int64_t j, uint16_t* out) {
  const int64_t r0 = kk * kTileK, c0 = j * kTile;
  if (!b.whole(r0, kTileK, c0, kTile)) {
    for (int64_t p = 0; p < kTile; ++p)
      for (int64_t c = 0; c < kTile; ++c) {
        out[(p * kTile + c) * 2] = b.at(r0 + 2 * p, c0 + c);
        out[(p * kTile + c) * 2 + 1] = b.at(r0 + 2 * p + 1, c0 + c);
      }
  } else if (!b.trans) {
    interleave_pairs(b.x + r0 * b.ld + c0, b.ld, reinterpret_cast<uint32_t*>(out));
  } else {  // B^T's rows hold the pairs as 32-bit words: transposed
    transpose_words(b.x + c0 * b.ld + r0, b.ld, reinterpret_cast<uint32_t*>(out));
  }
}

// Where run_tiles finds tile (i, kk) of A and (kk, j) of B: at + i (or j) * step + kk * k_step,
// rows `stride` bytes apart.
struct TileSource {
  const uint16_t* at;
  int64_t step, k_step, stride;
  const uint16_t* tile(int64_t i, int64_t kk) const { return at + i * step + kk * k_step; }
};

// C's tile (i, j): C itself where the tile lies inside it, else a 16 x 16 staging block (an edge)
// holding C's part or zeros.
struct CTile {
  float* at;
  int64_t stride;  // bytes
  bool staged;
};

}  // namespace

bool this_cpu_has_amx_bf16() {
  static const bool has = cpu_has_amx_bf16();
  return has;
}

bool amx_bf16_usable() {
  static const bool usable = kernel_vector_units().amx_bf16;
  return usable;
}

namespace {

// C[m, n] (+)= A B over mt x nt tiles of C and kt of K. Tiles are set up per call: oneDNN's kernels
// on this thread configure them their own way.
__attribute__((target("amx-tile,amx-bf16"))) void run_tiles(const TileSource& a, const TileSource& b, int64_t mt,
                                                            int64_t nt, int64_t kt, int64_t m, int64_t n, float beta,
                                                            float* c, int64_t ldc) {
  configure_tiles();
  alignas(64) float staging[4][kTile * kTile];
  auto tile_of = [&](int64_t i, int64_t j, int slot) {
    const bool inside = (i + 1) * kTile <= m && (j + 1) * kTile <= n;
    if (inside) return CTile{c + i * kTile * ldc + j * kTile, ldc * 4, false};
    float* s = staging[slot];
    for (int64_t r = 0; r < kTile; ++r)
      for (int64_t q = 0; q < kTile; ++q) {
        const int64_t row = i * kTile + r, col = j * kTile + q;
        s[r * kTile + q] = beta != 0 && row < m && col < n ? c[row * ldc + col] : 0.0f;
      }
    return CTile{s, kTile * 4, true};
  };
  auto write_back = [&](int64_t i, int64_t j, const CTile& t) {
    if (!t.staged) return;
    for (int64_t r = 0; r < kTile && i * kTile + r < m; ++r)
      for (int64_t q = 0; q < kTile && j * kTile + q < n; ++q) c[(i * kTile + r) * ldc + j * kTile + q] = t.at[r * kTile + q];
  };
  for (int64_t i = 0; i < mt; i += 2) {
    for (int64_t j = 0; j < nt; j += 2) {
      if (i + 1 < mt && j + 1 < nt) {  // 2 x 2 C tiles: each A and B tile loaded once for two products
        const CTile c00 = tile_of(i, j, 0), c01 = tile_of(i, j + 1, 1), c10 = tile_of(i + 1, j, 2),
                    c11 = tile_of(i + 1, j + 1, 3);
        if (beta == 0 && !c00.staged) _tile_zero(0); else _tile_loadd(0, c00.at, c00.stride);
        if (beta == 0 && !c01.staged) _tile_zero(1); else _tile_loadd(1, c01.at, c01.stride);
        if (beta == 0 && !c10.staged) _tile_zero(2); else _tile_loadd(2, c10.at, c10.stride);
        if (beta == 0 && !c11.staged) _tile_zero(3); else _tile_loadd(3, c11.at, c11.stride);
        for (int64_t kk = 0; kk < kt; ++kk) {
          _tile_loadd(4, a.tile(i, kk), a.stride);
          _tile_loadd(5, a.tile(i + 1, kk), a.stride);
          _tile_loadd(6, b.tile(j, kk), b.stride);
          _tile_loadd(7, b.tile(j + 1, kk), b.stride);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, c00.at, c00.stride);
        _tile_stored(1, c01.at, c01.stride);
        _tile_stored(2, c10.at, c10.stride);
        _tile_stored(3, c11.at, c11.stride);
        write_back(i, j, c00), write_back(i, j + 1, c01), write_back(i + 1, j, c10), write_back(i + 1, j + 1, c11);
      } else {  // the odd last row or column of tiles, one C tile at a time
        for (int64_t ii = i; ii < std::min(i + 2, mt); ++ii)
          for (int64_t jj = j; jj < std::min(j + 2, nt); ++jj) {
            const CTile t = tile_of(ii, jj, 0);
            if (beta == 0 && !t.staged) _tile_zero(0); else _tile_loadd(0, t.at, t.stride);
            for (int64_t kk = 0; kk < kt; ++kk) {
              _tile_loadd(4, a.tile(ii, kk), a.stride);
              _tile_loadd(6, b.tile(jj, kk), b.stride);
              _tile_dpbf16ps(0, 4, 6);
            }
            _tile_stored(0, t.at, t.stride);
            write_back(ii, jj, t);
          }
      }
    }
  }
  _tile_release();
}

// A's tiles: read in place where op(A) is A and whole tiles of it (rows of 32 bf16 from each
// row), else packed into `packed`.
TileSource a_tiles(bool trans_a, int64_t m, int64_t k, const uint16_t* a, int64_t lda, std::vector<uint16_t>& packed) {
  const int64_t mt = tiles(m, kTile), kt = k_tiles(k);
  if (!trans_a && m % kTile == 0 && k % kTileK == 0) return TileSource{a, kTile * lda, kTileK, 2 * lda};
  packed.resize(static_cast<size_t>(mt * kt * kTile * kTileK));
  const Operand op{a, lda, trans_a, m, k};
  for (int64_t i = 0; i < mt; ++i)
    for (int64_t kk = 0; kk < kt; ++kk) pack_a_tile(op, i, kk, packed.data() + (i * kt + kk) * kTile * kTileK);
  return TileSource{packed.data(), kt * kTile * kTileK, kTile * kTileK, 64};
}

void check_beta(float beta) {
  if (beta != 0 && beta != 1) throw std::invalid_argument("AMX products take beta 0 or 1");
}

}  // namespace

void AmxPackedB::pack(bool trans, int64_t k, int64_t n, const uint16_t* b, int64_t ld) {
  k_ = k, n_ = n;
  kt_ = k_tiles(k);
  const int64_t nt = tiles(n, kTile);
  tiles_.resize(static_cast<size_t>(nt * kt_ * kTile * kTileK));
  const Operand op{b, ld, trans, k, n};
  for (int64_t j = 0; j < nt; ++j)
    for (int64_t kk = 0; kk < kt_; ++kk) pack_b_tile(op, kk, j, tiles_.data() + (j * kt_ + kk) * kTile * kTileK);
}

bool AmxPackedB::holds(int64_t row0, int64_t k, int64_t col0, int64_t n) const {
  return row0 % kTileK == 0 && col0 % kTile == 0 && row0 >= 0 && col0 >= 0 && row0 + k <= k_ && col0 + n <= n_;
}

void amx_bf16_gemm_packed(bool trans_a, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                          const AmxPackedB& b, int64_t row0, int64_t col0, float beta, float* c, int64_t ldc) {
  check_beta(beta);
  if (!b.holds(row0, k, col0, n)) throw std::invalid_argument("AMX product: the window is not in the packed B's tiles");
  if (m <= 0 || n <= 0) return;
  thread_local std::vector<uint16_t> packed_a;
  const TileSource at = a_tiles(trans_a, m, k, a, lda, packed_a);
  const int64_t step = b.kt_ * kTile * kTileK;
  const TileSource bt{b.tiles_.data() + (col0 / kTile) * step + (row0 / kTileK) * kTile * kTileK, step,
                      kTile * kTileK, 64};
  run_tiles(at, bt, tiles(m, kTile), tiles(n, kTile), k_tiles(k), m, n, beta, c, ldc);
}

void amx_bf16_gemm_row_major(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                             int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  check_beta(beta);
  if (m <= 0 || n <= 0) return;
  thread_local AmxPackedB packed_b;
  packed_b.pack(trans_b, k, n, b, ldb);
  amx_bf16_gemm_packed(trans_a, m, n, k, a, lda, packed_b, 0, 0, beta, c, ldc);
}

#else

bool this_cpu_has_amx_bf16() { return false; }
bool amx_bf16_usable() { return false; }
void AmxPackedB::pack(bool, int64_t, int64_t, const uint16_t*, int64_t) {
  throw std::logic_error("no AMX on this architecture");
}
bool AmxPackedB::holds(int64_t, int64_t, int64_t, int64_t) const { return false; }
void amx_bf16_gemm_packed(bool, int64_t, int64_t, int64_t, const uint16_t*, int64_t, const AmxPackedB&, int64_t,
                          int64_t, float, float*, int64_t) {
  throw std::logic_error("no AMX on this architecture");
}
void amx_bf16_gemm_row_major(bool, bool, int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*,
                             int64_t, float, float*, int64_t) {
  throw std::logic_error("no AMX on this architecture");
}

#endif

}  // namespace xl::compute
