// The BLAS that LibTorch loaded (OpenBLAS on Debian when installed), found at run time so that no
// link dependency is added and another BLAS still works (without the OpenBLAS-only controls).
#pragma once
#include <cstdint>
#include <string>

namespace xl::compute {

struct Blas {
  // Fortran sgemm_ (column-major), present in every BLAS.
  using Sgemm = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                         const int*, const float*, const int*, const float*, float*, const int*);
  Sgemm sgemm = nullptr;
  void (*set_threads)(int) = nullptr;  // OpenBLAS only
  int (*get_threads)() = nullptr;      // OpenBLAS only
  // OpenBLAS's threads (openblas_get_parallel): 1 a pool of its own (the pthreads build), 2
  // OpenMP's (the OpenMP build, Debian's libopenblas0-openmp: one thread inside a parallel region,
  // OpenMP's thread count outside, so OpenBLAS and LibTorch never contend for cores), 0 none; -1
  // unknown.
  int openblas_threading = -1;
  bool own_threads() const { return set_threads && get_threads && openblas_threading != 0 && openblas_threading != 2; }
  // oneDNN's row-major sgemm, present where LibTorch loads oneDNN as a shared library (Debian's
  // build does); returns 0 on success.
  using OnednnSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                              int64_t, float, float*, int64_t);
  OnednnSgemm onednn_sgemm = nullptr;
  // oneDNN's row-major bf16 x bf16 -> fp32 GEMM (operands as bf16 bit patterns); 0 on success.
  using OnednnGemmBf16 = int (*)(char, char, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                                 const uint16_t*, int64_t, float, float*, int64_t);
  OnednnGemmBf16 onednn_gemm_bf16 = nullptr;
};

const Blas& blas();

// --- Which kernels OpenBLAS runs ---------------------------------------------------------------
// OpenBLAS (built for every x86-64 CPU, as Debian's is) picks its kernel set ("core") when it
// loads, or takes the one OPENBLAS_CORETYPE names. A version older than the CPU may not recognise
// it, and a profile written for another machine may name older kernels (OPENBLAS_CORETYPE=Haswell
// on an AVX-512 CPU runs AVX2 kernels, markedly slower: bench/HISTORY.md). OpenBLAS reads the variable
// only when it loads, so the choice is made before the tool re-executes itself. XL_BLAS_CORE
// overrides: keep (run what OpenBLAS would) or a core name.

// The instruction sets that decide which kernels can run.
struct CpuVectorUnits {
  bool avx = false;
  bool avx2_fma = false;
  bool avx512 = false;  // F, BW, DQ and VL: what OpenBLAS's SkylakeX kernels use
  bool avx512_bf16 = false;  // bf16 dot products (every CPU with AMX-BF16 has them too)
  bool amx_bf16 = false;     // bf16 products on AMX tiles, the process allowed to use them
};
CpuVectorUnits this_cpu_vector_units();
// The units xl's own vector kernels (rows, dropout masks, Adam) may use: this CPU's, capped by
// XL_VECTOR_UNITS (avx512: AVX-512 without AMX; avx2: AVX2 and narrower; none: plain loops; amx or
// unset: all the CPU has) so that one machine can check every path. The BLAS's choice is not capped.
CpuVectorUnits kernel_vector_units();
// Their name for -v and the benchmarks' JSON: amx, avx512, avx2 or none.
std::string kernel_vector_units_name();

// The core to ask OpenBLAS for, given the one it chose (any spelling) and what the CPU can run;
// empty when its own choice is as good (or it is another BLAS, or unknown). Never a core whose
// instructions the CPU lacks.
std::string better_openblas_core(const std::string& chosen, const CpuVectorUnits& cpu);

// Sets OPENBLAS_CORETYPE for the re-executed process when OpenBLAS would run older kernels than
// the CPU allows, or as XL_BLAS_CORE says.
void choose_blas_kernels_before_exec();

// "OpenBLAS 0.3.21 ..., SkylakeX kernels (chosen by xl for this CPU over Haswell; ...)": for -v and
// the benchmarks' JSON. blas_core() is the core running now, empty when unknown.
std::string blas_core();
std::string blas_description();
// The CPU's model name (/proc/cpuinfo).
std::string cpu_model_name();

// Row-major C[m, n] = op(A) op(B) + beta C with op(X) = X or X^T, through the column-major sgemm
// (C^T = op(B)^T op(A)^T). blas().sgemm must be present.
// Products go to oneDNN's sgemm where the process has it (LibTorch's own, where it is a shared
// library) and it measured faster, with AVX-512 and AVX2 alike (bench/HISTORY.md, "The product
// rules"). On one thread (inside a parallel region, or with one thread in all): every product whose
// A is not transposed (the attention's per-head products; with A transposed OpenBLAS was faster).
// On all threads: products up to 2^27 multiply-adds (the tiny model's projections and their
// gradients; the base model's, from 2^28 up, trained slower on oneDNN), and larger ones with a thin
// side, k or n at most 96, or m with neither operand transposed (the word-level output layers'
// gradients, on Intel and AMD CPUs alike), and A^T B over at most 192 rows (a weight's gradient
// with few rows a step); but not A B^T over 9
// to 128 rows of A (mostly slower on oneDNN there: runs_on_onednn). One row
// times B^T, outside a parallel region, runs as a dot product per row of B on all threads (see there).
// XL_GEMM=blas sends every product to the BLAS.
void sgemm_row_major(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                     const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// --- bf16 products (--precision bf16 on a CPU) ---------------------------------------------------
// Whether bf16 x bf16 -> fp32 products run natively here: oneDNN's bf16 GEMM is present (not with
// XL_GEMM=blas) and the CPU has AVX-512 BF16, within XL_VECTOR_UNITS. oneDNN runs them on AMX where
// the CPU has it, several times sgemm's speed at large shapes and the base model's projections
// alike (measured: bench/HISTORY.md, "bf16 products in xl's CPU kernels").
bool bf16_gemm_native();
// Row-major C[m, n] = op(A) op(B) + beta C with bf16 operands (their bit patterns), products and
// sums in fp32 and an fp32 C. bf16_gemm_native() must hold. With A not transposed and beta 0 or 1,
// on AMX tiles of xl's own where amx_bf16_usable() (amx_products.h): inside a parallel region up
// to 2^24 multiply-adds (the attention's per-head products, where the tiles beat oneDNN per call),
// outside one in column chunks over the threads up to a depth k of 4,096 (the layers' products,
// faster on the tiles on one thread and on all). Elsewhere on oneDNN (A^T B, where it was as fast
// as the tiles, which would pack A^T on every call). Measured: bench/HISTORY.md, "The attention's
// bf16 products on AMX tiles" and "The layers' bf16 products on AMX tiles too".
void bf16_gemm_row_major(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                         const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

// out[i] = in[i] rounded to the nearest bf16, ties to even (as LibTorch's conversion rounds), as
// bit patterns; NaN stays NaN; AVX-512 BF16's instructions (where kernel_vector_units has them)
// round denormal inputs to zero.
void round_to_bf16(const float* in, uint16_t* out, int64_t n);
// `count` rows of `width` floats, `ld_from` apart, rounded into rows `ld_to` apart.
void round_rows_to_bf16(const float* from, int64_t ld_from, uint16_t* to, int64_t ld_to, int64_t count,
                        int64_t width);

// Whether sgemm_row_major, called here, sends this product to oneDNN.
bool runs_on_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k);
// "oneDNN 2.6.3 where it runs the product faster, ..." or "BLAS", then where bf16 products run: for
// -v and the benchmarks' JSON.
std::string gemm_choice_description();

// While alive, BLAS runs each GEMM on the calling thread only: for loops that spread many small
// GEMMs over OpenMP's threads themselves. Only a BLAS with threads of its own needs telling; for
// OpenBLAS's OpenMP build it is a no-op (there, setting OpenBLAS's thread count sets OpenMP's for
// the whole process, and the loop would run on one thread).
class SingleThreadedBlas {
 public:
  SingleThreadedBlas();
  ~SingleThreadedBlas();
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  int saved_ = 0;
};

}  // namespace xl::compute
