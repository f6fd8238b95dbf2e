// The attention's batched matrix product against an explicit triple loop, for every operand layout
// the attention passes (contiguous, transposed views, permuted views, strided copies), one and
// several threads, and its gradients against autograd of torch::bmm.
#include <gtest/gtest.h>

#include "xl/kernels/cpu/batched_matmul.h"

using xl::kernels::batched_matmul;
using torch::Tensor;

namespace {

Tensor naive(const Tensor& a, const Tensor& b) {
  auto ad = a.to(torch::kDouble), bd = b.to(torch::kDouble);
  const int64_t n = a.size(0), m = a.size(1), k = a.size(2), p = b.size(2);
  auto out = torch::zeros({n, m, p}, torch::kDouble);
  auto A = ad.accessor<double, 3>(), B = bd.accessor<double, 3>(), C = out.accessor<double, 3>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < p; ++c) {
        double s = 0;
        for (int64_t j = 0; j < k; ++j) s += A[i][r][j] * B[i][j][c];
        C[i][r][c] = s;
      }
  return out;
}

void expect_close(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_LT((got.to(torch::kDouble) - want).abs().max().item<double>(), 1e-4) << what;
}

class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(torch::get_num_threads()) { torch::set_num_threads(n); }
  ~ThreadCount() { torch::set_num_threads(saved_); }

 private:
  int saved_;
};

}  // namespace

TEST(BatchedMatmul, MatchesTripleLoopForEveryOperandLayout) {
  torch::manual_seed(3);
  for (int threads : {1, 2}) {
    ThreadCount tc(threads);
    for (int64_t n : {1, 2, 5}) {
      auto a = torch::randn({n, 7, 5}), b = torch::randn({n, 5, 9});
      expect_close(xl::kernels::batched_matmul(a, b), naive(a, b), "contiguous");
      auto at = torch::randn({n, 5, 7}).transpose(1, 2), bt = torch::randn({n, 9, 5}).transpose(1, 2);
      expect_close(xl::kernels::batched_matmul(at, b), naive(at, b), "A transposed");
      expect_close(xl::kernels::batched_matmul(a, bt), naive(a, bt), "B transposed");
      expect_close(xl::kernels::batched_matmul(at, bt), naive(at, bt), "both transposed");
      // The positional keys: a [T, H, dh] projection read as [H, dh, T].
      auto r = torch::randn({9, n, 5}).permute({1, 2, 0});
      expect_close(xl::kernels::batched_matmul(a, r), naive(a, r), "permuted view");
      // Neither rows nor columns contiguous: copied first.
      auto s = torch::randn({n, 14, 5}).slice(1, 0, 14, 2);
      auto w = torch::randn({n, 5, 18}).slice(2, 0, 18, 2);
      expect_close(xl::kernels::batched_matmul(s, w), naive(s, w), "strided");
      // Broadcast batch (stride 0).
      auto e = torch::randn({1, 5, 9}).expand({n, 5, 9});
      expect_close(xl::kernels::batched_matmul(a, e), naive(a, e), "expanded batch");
    }
  }
}

TEST(BatchedMatmul, GradientsMatchTorchBmm) {
  torch::manual_seed(4);
  ThreadCount tc(2);
  auto a = torch::randn({6, 8, 4}, torch::requires_grad());
  auto bt = torch::randn({6, 11, 4}, torch::requires_grad());
  auto w = torch::randn({6, 8, 11});
  (xl::kernels::batched_matmul(a, bt.transpose(1, 2)) * w).sum().backward();
  auto a2 = a.detach().clone().requires_grad_(), bt2 = bt.detach().clone().requires_grad_();
  (torch::bmm(a2, bt2.transpose(1, 2)) * w).sum().backward();
  EXPECT_LT((a.grad() - a2.grad()).abs().max().item<double>(), 1e-5);
  EXPECT_LT((bt.grad() - bt2.grad()).abs().max().item<double>(), 1e-5);
  // Double precision goes through torch::bmm and stays exact.
  auto ad = torch::randn({2, 3, 4}, torch::kDouble), bd = torch::randn({2, 4, 5}, torch::kDouble);
  EXPECT_TRUE(torch::equal(xl::kernels::batched_matmul(ad, bd), torch::bmm(ad, bd)));
}
