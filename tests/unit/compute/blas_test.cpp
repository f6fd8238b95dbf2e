// The BLAS layer: which OpenBLAS kernels xl asks for on which CPU (never a kernel set the CPU
// cannot run, never a step down, unknown cores left alone), and the row-major GEMM against an
// explicit loop for every transpose combination, beta 0 (C never read) and not, small and large outputs,
// in fp32 and with bf16 operands.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <dlfcn.h>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include "xl/compute/amx_products.h"
#include "xl/compute/blas.h"
#include "xl/compute/parallel.h"

using xl::compute::better_openblas_core;
using xl::compute::CpuVectorUnits;

namespace {

xl::compute::CpuVectorUnits units(int level) {
  xl::compute::CpuVectorUnits u;
  u.avx = level >= 1;
  u.avx2_fma = level >= 2;
  u.avx512 = level >= 3;
  return u;
}

TEST(BlasCore, AsksForTheWidestKernelsTheCpuRuns) {
  // Zen 5 under OpenBLAS 0.3.21: Haswell's kernels on an AVX-512 CPU.
  EXPECT_EQ(xl::compute::better_openblas_core("Haswell", units(3)), "SkylakeX");
  EXPECT_EQ(xl::compute::better_openblas_core("Zen", units(3)), "SkylakeX");
  EXPECT_EQ(xl::compute::better_openblas_core("Prescott", units(3)), "SkylakeX");  // the generic fallback
  EXPECT_EQ(xl::compute::better_openblas_core("Sandybridge", units(2)), "Haswell");
  EXPECT_EQ(xl::compute::better_openblas_core("NEHALEM", units(1)), "Sandybridge");  // any spelling
}

TEST(BlasCore, NeverAsksForKernelsTheCpuCannotRun) {
  for (const char* core : {"Prescott", "Nehalem", "Sandybridge", "Haswell", "Zen"}) {
    const std::string got = xl::compute::better_openblas_core(core, units(2));
    EXPECT_TRUE(got.empty() || got == "Haswell") << core << " -> " << got;
    EXPECT_EQ(xl::compute::better_openblas_core(core, units(0)), "") << core;
  }
  EXPECT_EQ(xl::compute::better_openblas_core("Prescott", units(1)), "Sandybridge");
}

TEST(BlasCore, KeepsAChoiceAsGoodOrOneItDoesNotKnow) {
  EXPECT_EQ(xl::compute::better_openblas_core("SkylakeX", units(3)), "");
  EXPECT_EQ(xl::compute::better_openblas_core("Cooperlake", units(3)), "");
  EXPECT_EQ(xl::compute::better_openblas_core("SapphireRapids", units(3)), "");
  EXPECT_EQ(xl::compute::better_openblas_core("Haswell", units(2)), "");
  EXPECT_EQ(xl::compute::better_openblas_core("Zen", units(2)), "");
  EXPECT_EQ(xl::compute::better_openblas_core("SkylakeX", units(2)), "");  // a user's override is not undone
  EXPECT_EQ(xl::compute::better_openblas_core("Zen5", units(3)), "");      // a newer OpenBLAS's own core
  EXPECT_EQ(xl::compute::better_openblas_core("neoversen1", units(3)), "");
  EXPECT_EQ(xl::compute::better_openblas_core("", units(3)), "");  // another BLAS
}

TEST(BlasCore, TheCpuUnitsAreConsistent) {
  const xl::compute::CpuVectorUnits u = xl::compute::this_cpu_vector_units();
  EXPECT_TRUE(!u.avx512 || u.avx2_fma);
  EXPECT_TRUE(!u.avx2_fma || u.avx);
  EXPECT_NE(xl::compute::cpu_model_name(), "");
}

// What xl's own vector kernels use: never more than the CPU has, and no more than XL_VECTOR_UNITS
// allows (ctest runs the kernels' tests again with it at avx2 and none).
TEST(VectorUnits, KernelsUseWhatTheCpuHasUpToTheCap) {
  const xl::compute::CpuVectorUnits cpu = xl::compute::this_cpu_vector_units(), used = xl::compute::kernel_vector_units();
  const char* cap_env = std::getenv("XL_VECTOR_UNITS");
  const std::string cap = cap_env ? cap_env : "";
  const int allowed = cap == "none" ? 0 : cap == "avx2" ? 2 : cap == "avx512" ? 3 : 4;
  EXPECT_EQ(used.avx512, cpu.avx512 && allowed >= 3) << cap;
  EXPECT_EQ(used.avx2_fma, cpu.avx2_fma && allowed >= 2) << cap;
  EXPECT_EQ(used.avx, cpu.avx && allowed >= 2) << cap;
  EXPECT_EQ(used.avx512_bf16, cpu.avx512_bf16 && allowed >= 3) << cap;
  EXPECT_EQ(used.amx_bf16, cpu.amx_bf16 && allowed >= 4) << cap;
}

TEST(VectorUnits, RoundingToBf16GivesLibTorchsBits) {
  // The bf16 products' rounding (AVX-512 BF16's instructions, or the loop with the units capped)
  // against LibTorch's conversion: normal values, exact ties both ways, the largest finite values
  // (which round to infinity), infinities and zeros, over every tail length of a 32-float step, in
  // one run of floats and in rows apart.
  torch::manual_seed(4);
  torch::Tensor x = torch::randn({1000}) * 3;
  std::vector<float> special = {0.0f, -0.0f, INFINITY, -INFINITY, 3.4028235e38f, -3.4028235e38f, 1e-30f};
  for (uint32_t bits : {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x40408000u, 0x3f80ffffu}) {  // ties, near one
    float f;
    std::memcpy(&f, &bits, sizeof f);
    special.push_back(f);
  }
  x.narrow(0, 0, static_cast<int64_t>(special.size())).copy_(torch::tensor(special));
  const torch::Tensor want = x.to(torch::kBFloat16);
  const auto* want_bits = reinterpret_cast<const uint16_t*>(want.data_ptr<at::BFloat16>());
  for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{31}, int64_t{33}, int64_t{1000}}) {
    std::vector<uint16_t> got(static_cast<size_t>(n) + 1, 0xabcd);
    xl::compute::round_to_bf16(x.data_ptr<float>(), got.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], want_bits[i]) << "element " << i << " of " << n;
    EXPECT_EQ(got[static_cast<size_t>(n)], 0xabcd) << "wrote past " << n;
  }
  // Rows: widths with and without tails, each row from and to its own stride, the gaps left alone.
  for (int64_t width : {int64_t{1}, int64_t{17}, int64_t{32}, int64_t{33}, int64_t{64}}) {
    const int64_t rows = 7, ld_from = 101, ld_to = width + 3;
    std::vector<uint16_t> got(static_cast<size_t>(rows * ld_to), 0xabcd);
    xl::compute::round_rows_to_bf16(x.data_ptr<float>(), ld_from, got.data(), ld_to, rows, width);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < ld_to; ++i)
        ASSERT_EQ(got[static_cast<size_t>(r * ld_to + i)], i < width ? want_bits[r * ld_from + i] : 0xabcd)
            << "row " << r << " element " << i << " of width " << width;
  }
  const float nan = std::nanf("");
  uint16_t nan_bits = 0;
  xl::compute::round_to_bf16(&nan, &nan_bits, 1);
  EXPECT_EQ(nan_bits & 0x7f80, 0x7f80);
  EXPECT_NE(nan_bits & 0x7f, 0) << "NaN stays NaN";
}

// Every transpose combination and beta, a small output (cleared by the wrapper for beta 0), one
// past its threshold (cleared by the BLAS), one wider than 1,024 columns (A B^T in column blocks)
// and single rows (A B^T as a matrix-vector product), against an explicit loop in double precision.
// bf16: the operands rounded to bf16 (the loop reads the rounded values), through bf16_gemm_row_major
// (on all threads with AMX, beta 0 and 1 take the tiles in column chunks: 2,100 columns are six).
// amx: the same through the AMX tiles' product itself (beta 0 or 1), over whole tiles too (the
// attention's 64 rows, d_head 64, hundreds of keys).
enum class Product { kFp32, kBf16, kAmx };
void expect_products_match_loops(const char* where, Product product = Product::kFp32) {
  torch::manual_seed(3);
  const bool bf16 = product != Product::kFp32;
  std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {{37, 29, 53}, {300, 230, 7}, {5, 2100, 9}, {1, 2100, 9},
                                                               {1, 29, 53}};
  if (product == Product::kAmx) shapes.insert(shapes.end(), {{64, 800, 64}, {64, 64, 800}, {800, 64, 64}, {32, 48, 96}});
  for (auto [m, n, k] : shapes)
    for (float beta : product == Product::kAmx    ? std::vector<float>{1, 0}
                      : product == Product::kBf16 ? std::vector<float>{0.5f, 1, 0}
                                                  : std::vector<float>{0.5f, 0})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          // Stored as the transpose when op is T, with a leading dimension wider than the matrix.
          auto a = torch::randn({ta ? k : m, (ta ? m : k) + 3});
          auto b = torch::randn({tb ? n : k, (tb ? k : n) + 5});
          const torch::Tensor a16 = a.to(torch::kBFloat16), b16 = b.to(torch::kBFloat16);
          if (bf16) a = a16.to(torch::kFloat), b = b16.to(torch::kFloat);
          auto c = torch::randn({m, n + 2});
          if (beta == 0) c.narrow(1, 0, n).fill_(std::nanf(""));  // beta 0: C is never read
          auto c0 = c.clone();
          auto bits = [](const torch::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>()); };
          if (product == Product::kAmx)
            xl::compute::amx_bf16_gemm_row_major(ta, tb, m, n, k, bits(a16), a.size(1), bits(b16), b.size(1), beta,
                                               c.data_ptr<float>(), c.size(1));
          else if (bf16)
            xl::compute::bf16_gemm_row_major(ta, tb, m, n, k, bits(a16), a.size(1), bits(b16), b.size(1), beta,
                                           c.data_ptr<float>(), c.size(1));
          else
            xl::compute::sgemm_row_major(ta, tb, m, n, k, a.data_ptr<float>(), a.size(1), b.data_ptr<float>(),
                                       b.size(1), beta, c.data_ptr<float>(), c.size(1));
          auto A = a.accessor<float, 2>(), B = b.accessor<float, 2>(), C = c.accessor<float, 2>(),
               C0 = c0.accessor<float, 2>();
          double worst = 0;
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double s = beta == 0 ? 0.0 : beta * C0[i][j];
              for (int64_t p = 0; p < k; ++p) s += double(ta ? A[p][i] : A[i][p]) * double(tb ? B[j][p] : B[p][j]);
              const double e = std::abs(s - C[i][j]);
              worst = std::isnan(e) ? INFINITY : std::max(worst, e);
            }
          // fp32 sums of k products: their rounding grows with k.
          EXPECT_LT(worst, 1e-4 * std::max<double>(1, k / 16.0))
              << where << ": " << m << " x " << n << " x " << k << " beta " << beta << " trans_a " << ta << " trans_b "
              << tb;
          for (int64_t i = 0; i < m; ++i)  // the padding columns are untouched
            for (int64_t j = n; j < n + 2; ++j) EXPECT_EQ(C[i][j], C0[i][j]);
        }
}

TEST(BlasGemm, RowMajorProductMatchesAnExplicitLoop) {
  if (!xl::compute::blas().sgemm) GTEST_SKIP() << "no sgemm_ in this process";
  at::set_num_threads(2);
  const bool onednn = xl::compute::blas().onednn_sgemm != nullptr;
  // On all threads: oneDNN for small products (either A), the BLAS for large ones unless a side is
  // thin.
  EXPECT_EQ(xl::compute::runs_on_onednn(false, true, 2048, 512, 128), onednn);
  EXPECT_EQ(xl::compute::runs_on_onednn(true, false, 384, 128, 2048), onednn);
  EXPECT_FALSE(xl::compute::runs_on_onednn(false, true, 1024, 2048, 512));
  EXPECT_FALSE(xl::compute::runs_on_onednn(true, false, 2048, 512, 1024));
  EXPECT_EQ(xl::compute::runs_on_onednn(false, false, 74, 410, 160000), onednn);  // a cluster's input gradient
  EXPECT_EQ(xl::compute::runs_on_onednn(true, false, 160000, 410, 74), onednn);   // its weight gradient
  EXPECT_EQ(xl::compute::runs_on_onednn(false, false, 306, 39, 160000), onednn);  // a narrow cluster's
  EXPECT_FALSE(xl::compute::runs_on_onednn(false, true, 64, 4096, 1024));         // few rows times B^T
  EXPECT_FALSE(xl::compute::runs_on_onednn(false, true, 16, 2048, 512));          // ... and small ones
  EXPECT_FALSE(xl::compute::runs_on_onednn(false, true, 128, 1536, 512));
  EXPECT_EQ(xl::compute::runs_on_onednn(false, true, 128, 384, 128), onednn);  // not with a small weight
  EXPECT_EQ(xl::compute::runs_on_onednn(false, true, 8, 2048, 512), onednn);   // nor with up to 8 rows
  EXPECT_EQ(xl::compute::runs_on_onednn(false, false, 16, 2048, 512), onednn);  // nor times B
  EXPECT_EQ(xl::compute::runs_on_onednn(true, false, 2496, 624, 150), onednn);  // a gradient over few rows
  EXPECT_FALSE(xl::compute::runs_on_onednn(true, false, 2496, 624, 512));       // ... but not over many
  expect_products_match_loops("all threads");
  // Large thin products against LibTorch's double-precision product.
  struct Thin { bool ta, tb; int64_t m, n, k; };
  for (const Thin& t : {Thin{false, false, 40, 300, 20000}, Thin{true, false, 20000, 300, 40}, Thin{false, false, 300, 40, 20000},
                        Thin{false, true, 300, 40, 20000}}) {
    ASSERT_GT(t.m * t.n * t.k, int64_t{1} << 27);
    const torch::Tensor a = t.ta ? torch::randn({t.k, t.m}) : torch::randn({t.m, t.k});
    const torch::Tensor b = t.tb ? torch::randn({t.n, t.k}) : torch::randn({t.k, t.n});
    torch::Tensor c = torch::empty({t.m, t.n});
    xl::compute::sgemm_row_major(t.ta, t.tb, t.m, t.n, t.k, a.data_ptr<float>(), a.size(1), b.data_ptr<float>(), b.size(1), 0,
                               c.data_ptr<float>(), t.n);
    const torch::Tensor ad = t.ta ? a.t().to(torch::kDouble) : a.to(torch::kDouble);
    const torch::Tensor bd = t.tb ? b.t().to(torch::kDouble) : b.to(torch::kDouble);
    EXPECT_LT((c.to(torch::kDouble) - ad.mm(bd)).abs().max().item<double>(), 1e-2)  // sums of 40 to 20,000 products of N(0, 1)
        << t.m << " x " << t.n << " x " << t.k << " trans_a " << t.ta << " trans_b " << t.tb;
  }
  // Many rows on the BLAS: each thread its own unequal share of them (1,031 rows), from operands
  // and into an output with leading dimensions wider than the matrices.
  const int64_t m = 1031, n = 200, k = 700;
  ASSERT_FALSE(xl::compute::runs_on_onednn(false, false, m, n, k));
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 0.5f}) {
        const torch::Tensor a = ta ? torch::randn({k, m + 3}) : torch::randn({m, k + 3});
        const torch::Tensor b = tb ? torch::randn({n, k + 5}) : torch::randn({k, n + 5});
        torch::Tensor c = torch::randn({m, n + 2});
        const torch::Tensor c0 = c.clone();
        xl::compute::sgemm_row_major(ta, tb, m, n, k, a.data_ptr<float>(), a.size(1), b.data_ptr<float>(), b.size(1), beta,
                                   c.data_ptr<float>(), c.size(1));
        const torch::Tensor ad = (ta ? a.narrow(1, 0, m).t() : a.narrow(1, 0, k)).to(torch::kDouble);
        const torch::Tensor bd = (tb ? b.narrow(1, 0, k).t() : b.narrow(1, 0, n)).to(torch::kDouble);
        const torch::Tensor want = ad.mm(bd) + beta * c0.narrow(1, 0, n).to(torch::kDouble);
        EXPECT_LT((c.narrow(1, 0, n).to(torch::kDouble) - want).abs().max().item<double>(), 1e-3)
            << "trans_a " << ta << " trans_b " << tb << " beta " << beta;
        EXPECT_TRUE(c.narrow(1, n, 2).equal(c0.narrow(1, n, 2))) << "the padding columns are untouched";
      }
}

TEST(BlasGemm, OneThreadProductsMatchAnExplicitLoop) {
  // Inside a parallel region each product runs on its thread: oneDNN's where the process has it.
  if (!xl::compute::blas().sgemm) GTEST_SKIP() << "no sgemm_ in this process";
  const bool onednn = xl::compute::blas().onednn_sgemm != nullptr;
  xl::compute::parallel_for(0, 2, 1, [&](int64_t b, int64_t) {
    if (b != 0) return;  // one task checks (gtest's expectations from one thread)
    EXPECT_EQ(xl::compute::runs_on_onednn(false, true, 64, 1024, 64), onednn);
    EXPECT_FALSE(xl::compute::runs_on_onednn(true, false, 1024, 64, 64));  // transposed A: the BLAS
    expect_products_match_loops(onednn ? "oneDNN" : "one-thread BLAS");
  });
  if (!onednn) GTEST_SKIP() << "no oneDNN in this process: " << xl::compute::gemm_choice_description();
}

TEST(BlasGemm, Bf16ProductsMatchAnExplicitLoopOverTheRoundedOperands) {
  // --precision bf16's products on a CPU: fp32 sums of the rounded operands' products, on all
  // threads and on one (inside a parallel region).
  if (!xl::compute::bf16_gemm_native())
    GTEST_SKIP() << "no bf16 products here: " << xl::compute::gemm_choice_description();
  at::set_num_threads(2);
  expect_products_match_loops("bf16, all threads", Product::kBf16);
  xl::compute::parallel_for(0, 2, 1, [&](int64_t b, int64_t) {
    if (b == 0) expect_products_match_loops("bf16, one thread", Product::kBf16);
  });
}

TEST(BlasGemm, AmxTileProductsMatchAnExplicitLoopOverTheRoundedOperands) {
  // One thread's bf16 products where the CPU has AMX (bf16_gemm_row_major sends the small ones
  // whose A is not transposed there, so the test above checks them through it too): every
  // transpose, edges of tiles in every dimension, odd leading dimensions, C added to or
  // overwritten, nothing written past its columns.
  if (!xl::compute::amx_bf16_usable())
    GTEST_SKIP() << "no AMX tiles here (vector units " << xl::compute::kernel_vector_units_name() << ")";
  expect_products_match_loops("AMX", Product::kAmx);
}

TEST(BlasGemm, AmxLayerProductsGiveTheSameBitsOnAnyNumberOfThreads) {
  // A layer's product splits C's columns over the threads (bf16_gemm_row_major); each element
  // sums over k in one order whatever the split, so runs on 1, 2, 3 or 4 threads agree to the bit
  // (k = 520: A's tiles packed, an edge in k).
  if (!xl::compute::amx_bf16_usable())
    GTEST_SKIP() << "no AMX tiles here (vector units " << xl::compute::kernel_vector_units_name() << ")";
  torch::manual_seed(5);
  const torch::Tensor a = torch::randn({1000, 520}).to(torch::kBFloat16), b = torch::randn({1500, 520}).to(torch::kBFloat16);
  auto bits = [](const torch::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>()); };
  std::vector<torch::Tensor> got;
  const int before = at::get_num_threads();
  for (int threads : {2, 1, 3, 4}) {
    at::set_num_threads(threads);
    torch::Tensor c = torch::empty({1000, 1500});
    xl::compute::bf16_gemm_row_major(false, true, 1000, 1500, 520, bits(a), 520, bits(b), 520, 0, c.data_ptr<float>(), 1500);
    got.push_back(c);
  }
  at::set_num_threads(before);
  EXPECT_TRUE(torch::equal(got[1], got[0])) << "1 thread against 2";
  EXPECT_TRUE(torch::equal(got[2], got[0])) << "3 threads against 2";
  EXPECT_TRUE(torch::equal(got[3], got[0])) << "4 threads against 2";
  const torch::Tensor want = a.to(torch::kDouble).mm(b.to(torch::kDouble).t());
  EXPECT_LT((got[0].to(torch::kDouble) - want).abs().max().item<double>(), 1e-2);  // fp32 sums of 520 products
}

TEST(BlasThreads, SingleThreadedProductsKeepTheLoopsThreads) {
  // The attention spreads its per-head products over OpenMP's threads with the BLAS on one thread
  // each. OpenBLAS's OpenMP build sets OpenMP's thread count when told its own (and oneDNN's
  // products, LibTorch's loops, then run on one thread): OpenMP's count must stay, the loop must
  // get both threads, and a BLAS with threads of its own must run on one.
  if (!xl::compute::blas().sgemm) GTEST_SKIP() << "no sgemm_ in this process";
  const xl::compute::Blas& l = xl::compute::blas();
  using IntFn = int (*)();
  const auto openmp_threads = reinterpret_cast<IntFn>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  if (!openmp_threads) GTEST_SKIP() << "no OpenMP runtime in this process";
  xl::compute::set_threads(2);
  {
    xl::compute::SingleThreadedBlas single;
    EXPECT_EQ(openmp_threads(), 2) << xl::compute::blas_description();
    EXPECT_EQ(at::get_num_threads(), 2);
    std::atomic<int> ran{0};
    std::set<std::thread::id> ids;
    std::mutex m;
    xl::compute::parallel_for(0, 2, 1, [&](int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // both must be running at once
      std::lock_guard<std::mutex> lock(m);
      ids.insert(std::this_thread::get_id());
      ++ran;
    });
    EXPECT_EQ(ran.load(), 2);
    EXPECT_EQ(ids.size(), 2u) << xl::compute::blas_description();
    if (l.own_threads()) {
      EXPECT_EQ(l.get_threads(), 1);
    }
  }
  EXPECT_EQ(openmp_threads(), 2);
  if (l.get_threads) {
    EXPECT_EQ(l.get_threads(), 2);
  }
}

}  // namespace
