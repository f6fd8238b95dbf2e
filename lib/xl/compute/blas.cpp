#include "xl/compute/blas.h"

#include <dlfcn.h>
#include <immintrin.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "xl/compute/amx_products.h"
#include "xl/compute/parallel.h"
#include "xl/compute/vector_math.h"

namespace xl::compute {
namespace {

// The user's choice: auto (unset), keep (what OpenBLAS runs, OPENBLAS_CORETYPE included) or a core.
constexpr const char* kChoice = "XL_BLAS_CORE";
// Set in the re-executed process when xl asked OpenBLAS for other kernels: what it ran before.
constexpr const char* kPicked = "XL_OPENBLAS_PICKED";

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// How wide OpenBLAS's kernels for a core are: 3 AVX-512, 2 AVX2+FMA, 1 AVX, 0 SSE only; -1 for a
// core this table does not know (a newer OpenBLAS's, or a non-x86 one), which is left alone.
int core_level(const std::string& core) {
  static const std::set<std::string> avx512 = {"skylakex", "cooperlake", "sapphirerapids"};
  static const std::set<std::string> avx2 = {"haswell", "zen", "excavator"};
  static const std::set<std::string> avx = {"sandybridge", "bulldozer", "piledriver", "steamroller"};
  static const std::set<std::string> sse = {"unknown", "katmai", "coppermine", "northwood", "prescott", "banias",
                                            "core2", "penryn", "dunnington", "nehalem", "atom", "athlon",
                                            "opteron", "opteron_sse3", "barcelona", "bobcat", "nano"};
  const std::string c = lower(core);
  if (avx512.count(c)) return 3;
  if (avx2.count(c)) return 2;
  if (avx.count(c)) return 1;
  if (sse.count(c)) return 0;
  return -1;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// OpenMP's answers where LibTorch loaded its runtime (false without one).
bool in_parallel_region() {
  static const auto in_parallel = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_in_parallel"));
  return in_parallel && in_parallel();
}
// The threads a parallel region started here would have (1 without OpenMP).
int64_t region_threads() {
  static const auto max_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  return max_threads ? std::max(1, max_threads()) : 1;
}
bool one_thread_in_all() { return region_threads() == 1; }

// Whether a oneDNN call made here runs on this thread alone: oneDNN (built on the OpenMP runtime
// LibTorch loaded) goes serial inside a parallel region and uses OpenMP's thread count outside.
bool on_this_thread_only() { return in_parallel_region() || one_thread_in_all(); }

}  // namespace

const Blas& blas() {
  static const Blas b = [] {
    Blas r;
    r.sgemm = reinterpret_cast<Blas::Sgemm>(dlsym(RTLD_DEFAULT, "sgemm_"));
    r.set_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    r.get_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    auto parallel = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
    if (parallel) r.openblas_threading = parallel();
    if (env("XL_GEMM") != "blas") {
      r.onednn_sgemm = reinterpret_cast<Blas::OnednnSgemm>(dlsym(RTLD_DEFAULT, "dnnl_sgemm"));
      r.onednn_gemm_bf16 = reinterpret_cast<Blas::OnednnGemmBf16>(dlsym(RTLD_DEFAULT, "dnnl_gemm_bf16bf16f32"));
    }
    return r;
  }();
  return b;
}

CpuVectorUnits this_cpu_vector_units() {
  CpuVectorUnits u;
#if defined(__x86_64__)
  // libgcc's checks include the operating system's support for the wider registers (XCR0).
  __builtin_cpu_init();
  u.avx = __builtin_cpu_supports("avx");
  u.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  u.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  u.avx512_bf16 = u.avx512 && __builtin_cpu_supports("avx512bf16");
  u.amx_bf16 = u.avx512_bf16 && this_cpu_has_amx_bf16();
#endif
  return u;
}

CpuVectorUnits kernel_vector_units() {
  static const CpuVectorUnits units = [] {
    CpuVectorUnits u = this_cpu_vector_units();
    const std::string cap = lower(env("XL_VECTOR_UNITS"));
    if (cap == "avx512" || cap == "avx2" || cap == "none") u.amx_bf16 = false;
    if (cap == "avx2" || cap == "none") u.avx512 = u.avx512_bf16 = false;
    if (cap == "none") u.avx = u.avx2_fma = false;
    // Said once, by the process that runs the tool (run_torch_tool re-executes the first).
    if (!cap.empty() && cap != "amx" && cap != "avx512" && cap != "avx2" && cap != "none" &&
        std::getenv("XL_RUNTIME_READY"))
      std::fprintf(stderr, "xl: XL_VECTOR_UNITS=%s is not amx, avx512, avx2 or none; using all this CPU has\n",
                   cap.c_str());
    return u;
  }();
  return units;
}

std::string kernel_vector_units_name() {
  const CpuVectorUnits u = kernel_vector_units();
  return u.amx_bf16 ? "amx" : u.avx512 ? "avx512" : u.avx2_fma ? "avx2" : "none";
}

std::string better_openblas_core(const std::string& chosen, const CpuVectorUnits& cpu) {
  const int have = core_level(chosen);
  if (chosen.empty() || have < 0) return "";
  const int best = cpu.avx512 ? 3 : cpu.avx2_fma ? 2 : cpu.avx ? 1 : 0;
  if (best <= have) return "";
  return best == 3 ? "SkylakeX" : best == 2 ? "Haswell" : "Sandybridge";
}

std::string blas_core() {
  using Corename = char* (*)();
  auto corename = reinterpret_cast<Corename>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const char* name = corename ? corename() : nullptr;
  return name ? name : "";
}

void choose_blas_kernels_before_exec() {
  const std::string mode = env(kChoice);
  if (mode == "keep") return;
  if (!mode.empty() && mode != "auto") {
    setenv("OPENBLAS_CORETYPE", mode.c_str(), 1);
    return;
  }
  // What OpenBLAS runs: its own pick, or what OPENBLAS_CORETYPE asked for. An inherited setting
  // older than the CPU (a profile written for another machine) is upgraded too. This runs before
  // the libraries' initialisers (torch_process.cpp), so a DYNAMIC_ARCH OpenBLAS picks its kernels
  // here first, as its initialiser would (the call is guarded inside: once per process).
  using DynamicInit = void (*)();
  if (auto init = reinterpret_cast<DynamicInit>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"))) init();
  const std::string running = blas_core();
  const std::string better = better_openblas_core(running, this_cpu_vector_units());
  if (better.empty()) return;
  setenv(kPicked, running.c_str(), 1);
  setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
}

std::string blas_description() {
  using Config = char* (*)();
  auto config = reinterpret_cast<Config>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  const std::string core = blas_core();
  if (!config || core.empty()) {
    Dl_info info{};
    if (blas().sgemm && dladdr(reinterpret_cast<void*>(blas().sgemm), &info) && info.dli_fname)
      return std::string("not OpenBLAS: ") + info.dli_fname;
    return "no BLAS found";
  }
  std::string d = std::string(config()) + ", " + core + " kernels";
  const std::string forced = env("OPENBLAS_CORETYPE"), picked = env(kPicked), mode = env(kChoice);
  if (!picked.empty() && lower(forced) == lower(core))
    d += " (chosen by xl for this CPU over " + picked + "; " + kChoice + "=keep keeps " + picked + ")";
  else if (!mode.empty() && mode != "auto" && mode != "keep")
    d += std::string(" (") + kChoice + "=" + mode + ")";
  else if (!forced.empty())
    d += " (OPENBLAS_CORETYPE=" + forced + ")";
  else
    d += " (OpenBLAS's own choice)";
  const int threading = blas().openblas_threading;
  return d + (threading == 2 ? ", on OpenMP's threads" : threading == 1 ? ", on threads of its own" : "");
}

bool runs_on_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k) {
  if (!blas().onednn_sgemm) return false;
  if (on_this_thread_only()) return !trans_a;
  constexpr int64_t kOnAllThreadsMax = int64_t{1} << 27;  // multiply-adds
  // A thin side: the word-level output layers' gradients (a cluster's few rows, or its narrow
  // embedding), faster on oneDNN on Intel and AMD CPUs alike, where OpenBLAS packs a whole operand
  // for a few multiply-adds per element (measured: bench/HISTORY.md, "Products with a thin side").
  // A B^T with few rows of A ran slower on oneDNN there, as below.
  constexpr int64_t kThin = 96;
  const bool thin = k <= kThin || n <= kThin || (m <= kThin && !trans_a && !trans_b);
  // x W^T with 9 to 128 rows of x (evaluation and prompts with few streams, generation with a few):
  // oneDNN took longer than OpenBLAS at 16 and 32 rows whatever the weight, and at 64 and 128 rows
  // with weights of 512 x 512 and up; with up to 8 rows it was the faster one (measured:
  // bench/HISTORY.md, "Products over few rows").
  constexpr int64_t kFewRowsMin = 9, kFewRowsMax = 128, kFewRowsOnlyWideMin = 64, kWideWeight = 512 * 512;
  if (!trans_a && trans_b && m >= kFewRowsMin && m <= kFewRowsMax && k > kThin && n > kThin &&
      (m < kFewRowsOnlyWideMin || n * k >= kWideWeight))
    return false;
  // dY^T X over up to 192 rows (a weight's gradient in training with few rows a step): oneDNN ran
  // these faster than OpenBLAS at every weight size measured, including the large ones the size
  // rule would send to OpenBLAS (measured: bench/HISTORY.md, "Products over few rows").
  constexpr int64_t kFewRowsGradientMax = 192;
  if (trans_a && !trans_b && k <= kFewRowsGradientMax) return true;
  return m * n * k <= kOnAllThreadsMax || thin;
}

std::string gemm_choice_description() {
  const std::string bf16 =
      !bf16_gemm_native()   ? "; bf16 products in autocast's tensor ops (no AVX-512 BF16 or no oneDNN)"
      : amx_bf16_usable()   ? "; bf16 products in xl's kernels on AMX tiles of xl's own (A^T, and the largest, on "
                              "oneDNN's bf16 GEMM), fp32 sums"
                            : "; bf16 products in xl's kernels on oneDNN's bf16 GEMM, fp32 sums";
  if (!blas().onednn_sgemm) return "BLAS" + bf16;
  struct Version {
    int major, minor, patch;
    const char* hash;
    unsigned cpu_runtime, gpu_runtime;
  };
  using VersionFn = const Version* (*)();
  auto version = reinterpret_cast<VersionFn>(dlsym(RTLD_DEFAULT, "dnnl_version"));
  const Version* v = version ? version() : nullptr;
  std::string d = "oneDNN";
  if (v) d += " " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  return d + " where it runs the product faster, the BLAS elsewhere (XL_GEMM=blas: the BLAS only)" + bf16;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name, family, model;
  auto value = [&] { return line.substr(std::min(line.size(), line.find(':') + 2)); };
  while (std::getline(in, line) && (name.empty() || family.empty() || model.empty())) {
    if (name.empty() && line.rfind("model name", 0) == 0) name = value();
    else if (family.empty() && line.rfind("cpu family", 0) == 0) family = value();
    else if (model.empty() && line.rfind("model\t", 0) == 0) model = value();
  }
  if (name.empty()) return "unknown CPU";
  return family.empty() ? name : name + " (family " + family + ", model " + model + ")";
}

void sgemm_row_major(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                     const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const int la = static_cast<int>(lda), lb = static_cast<int>(ldb), lc = static_cast<int>(ldc);
  const float one = 1;
  // One row times B^T on all threads, c = B a (batch-1 generation's layers and word logits): a
  // matrix-vector product, bound by reading B, as one dot product per row of B. At the wt103
  // shape's layers (1,872 x 624 to 624 x 2,496) and word clusters (20,003 x 624 to 67,735 x 9),
  // from memory, these read B faster than OpenBLAS's sgemv, which itself had beaten oneDNN's sgemm
  // (measured: bench/HISTORY.md, "Batch-1 layers and word logits as row dots"). A parallel region
  // (a task's own product) leaves them to the products below.
  if (m == 1 && trans_b && !in_parallel_region()) {
    std::vector<float> column;
    const float* x = a;
    if (trans_a && lda != 1) {  // a is a column of A^T: gathered once
      column.resize(static_cast<size_t>(k));
      for (int64_t i = 0; i < k; ++i) column[static_cast<size_t>(i)] = a[i * lda];
      x = column.data();
    }
    parallel_for(0, n, std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        const float v = vec::dot(b + o * ldb, x, k);
        c[o] = beta == 0 ? v : v + beta * c[o];
      }
    });
    return;
  }
  // A B^T on one thread (the attention's scores) slowed down in oneDNN past about 1,200 columns
  // (A B and A^T B did not; measured: bench/HISTORY.md, "Two layouts of the per-head products"):
  // wide ones run as equal column blocks of at most 1,024, each a B^T of its own rows.
  constexpr int64_t kWideColumns = 1024;
  if (!trans_a && trans_b && n > kWideColumns) {
    const int64_t blocks = (n + kWideColumns - 1) / kWideColumns;
    const int64_t width = ((n + blocks - 1) / blocks + 15) / 16 * 16;
    for (int64_t col = 0; col < n; col += width)
      sgemm_row_major(false, true, m, std::min(width, n - col), k, a, lda, b + col * ldb, ldb, beta, c + col, ldc);
    return;
  }
  const char op_a = trans_a ? 'T' : 'N', op_b = trans_b ? 'T' : 'N';
  if (runs_on_onednn(trans_a, trans_b, m, n, k) &&
      blas().onednn_sgemm(op_a, op_b, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc) == 0)
    return;
  // OpenBLAS clears C for beta = 0 in a pass of narrow stores, a real share of a small product's
  // time (the attention's per-head products; measured: bench/HISTORY.md, "Clearing C"); memset
  // is faster while C fits in the core's cache. Larger outputs are left to the BLAS.
  constexpr int64_t kSmallOutput = 65536;
  if (beta == 0 && m * n <= kSmallOutput) {
    for (int64_t row = 0; row < m; ++row) std::memset(c + row * ldc, 0, sizeof(float) * static_cast<size_t>(n));
    beta = 1;
  }
  // Many rows: each thread runs its own share of C's rows as a one-thread product (OpenBLAS's
  // OpenMP build goes serial inside a parallel region). At the base model's layer shapes (1,024
  // to 2,048 rows) OpenBLAS's own threads wait on each other's packed panels and were no faster
  // (measured: bench/HISTORY.md, "One product, each thread its own rows"); each thread packs all of
  // op(B), at 512 rows a thread or more a small share of its multiply-adds.
  constexpr int64_t kRowsPerThreadMin = 512;
  const int64_t threads = region_threads();
  if (blas().openblas_threading == 2 && threads > 1 && m >= kRowsPerThreadMin * threads && !in_parallel_region()) {
    parallel_for(0, m, kRowsPerThreadMin, [&](int64_t r0, int64_t r1) {
      const int rows = static_cast<int>(r1 - r0);
      const float* a_rows = trans_a ? a + r0 : a + r0 * lda;
      blas().sgemm(&op_b, &op_a, &ni, &rows, &ki, &one, b, &lb, a_rows, &la, &beta, c + r0 * ldc, &lc);
    });
    return;
  }
  blas().sgemm(&op_b, &op_a, &ni, &mi, &ki, &one, b, &lb, a, &la, &beta, c, &lc);
}

namespace {

// A layer's product on the tiles, split by columns of C over the threads: each thread packs the
// columns of B it multiplies by, in chunks of at most 512 (a chunk of B packed stays in the core's
// cache while every row of A passes it), and the chunks are a multiple of the threads so that each
// gets as many. Each element of C sums over k in the same order whatever the split.
void amx_products_by_columns(bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                             const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  constexpr int64_t kChunkMax = 512, kAlign = 32;  // 32: the kernel's 2 x 2 blocks of 16-column tiles
  auto ceil_div = [](int64_t x, int64_t y) { return (x + y - 1) / y; };
  const int64_t threads = region_threads();
  const int64_t chunks = threads * ceil_div(ceil_div(n, threads), kChunkMax);
  const int64_t width = ceil_div(ceil_div(n, chunks), kAlign) * kAlign;
  parallel_for(0, ceil_div(n, width), 1, [&](int64_t c0, int64_t c1) {
    for (int64_t chunk = c0; chunk < c1; ++chunk) {
      const int64_t col = chunk * width, cols = std::min(width, n - col);
      amx_bf16_gemm_row_major(false, trans_b, m, cols, k, a, lda, trans_b ? b + col * ldb : b + col, ldb, beta,
                              c + col, ldc);
    }
  });
}

}  // namespace

bool bf16_gemm_native() { return blas().onednn_gemm_bf16 && kernel_vector_units().avx512_bf16; }

void bf16_gemm_row_major(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                         const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // Inside a parallel region small ones only (the attention's are at most a few million
  // multiply-adds): packing a large B whole would keep tens of MB a thread. Outside, a chunk packs
  // at most 512 x 4,096 of B (4 MB), on as many threads as there are (one included).
  constexpr int64_t kTileProductsMax = int64_t{1} << 24, kLayerDepthMax = 4096;
  if (!trans_a && amx_bf16_usable() && (beta == 0 || beta == 1)) {
    if (!in_parallel_region() && k <= kLayerDepthMax)
      return amx_products_by_columns(trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
    if (on_this_thread_only() && m * n * k <= kTileProductsMax)
      return amx_bf16_gemm_row_major(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
  }
  const int status =
      blas().onednn_gemm_bf16(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  if (status != 0) throw std::runtime_error("oneDNN's bf16 GEMM failed with status " + std::to_string(status));
}

namespace {

#if defined(__x86_64__)
// 32 floats an instruction, rounded to nearest even as the loop below rounds them (denormal inputs
// become zero). The loop alone was slow enough to double the bf16 attention's time in the base
// model's step. All the rows in one call: a head's rows (32 or 64 floats, a layer's width apart),
// rounded from outside the caches, went faster so than with a call per row (measured:
// bench/HISTORY.md, "bf16 products in xl's CPU kernels" and "Rounding rows in one function").
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void round_rows_avx512(
    const float* from, int64_t ld_from, uint16_t* to, int64_t ld_to, int64_t count, int64_t width) {
  for (int64_t r = 0; r < count; ++r) {
    const float* in = from + r * ld_from;
    uint16_t* out = to + r * ld_to;
    int64_t i = 0;
    for (; i + 32 <= width; i += 32) {
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(in + i + 16), _mm512_loadu_ps(in + i));
      _mm512_storeu_si512(out + i, reinterpret_cast<const __m512i&>(v));
    }
    for (; i < width; i += 16) {
      const __mmask16 m =
          width - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (width - i)) - 1);
      const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, in + i));
      _mm256_mask_storeu_epi16(out + i, m, reinterpret_cast<const __m256i&>(v));
    }
  }
}
#endif

}  // namespace

void round_to_bf16(const float* in, uint16_t* out, int64_t n) { round_rows_to_bf16(in, n, out, n, 1, n); }

void round_rows_to_bf16(const float* from, int64_t ld_from, uint16_t* to, int64_t ld_to, int64_t count,
                        int64_t width) {
#if defined(__x86_64__)
  static const bool units = kernel_vector_units().avx512_bf16;
  if (units) return round_rows_avx512(from, ld_from, to, ld_to, count, width);
#endif
  for (int64_t r = 0; r < count; ++r)
    for (int64_t i = 0; i < width; ++i) {
      uint32_t bits;
      std::memcpy(&bits, from + r * ld_from + i, sizeof bits);
      const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
      to[r * ld_to + i] = nan ? static_cast<uint16_t>((bits >> 16) | 0x40u)
                              : static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    }
}

SingleThreadedBlas::SingleThreadedBlas() {
  const Blas& l = blas();
  if (l.own_threads()) {
    saved_ = l.get_threads();
    l.set_threads(1);
  }
}

SingleThreadedBlas::~SingleThreadedBlas() {
  if (saved_ > 0) blas().set_threads(saved_);
}

}  // namespace xl::compute
