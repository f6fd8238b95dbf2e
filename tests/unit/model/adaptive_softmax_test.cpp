// The adaptive softmax: a normalized distribution matching the loss, equal to the clusters
// computed explicitly, evaluated in blocks of columns, its weights followed without autograd, and
// its gradients as LibTorch's own operations give them.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "support/tiny_models.h"
#include "xl/compute/kernel_choice.h"
#include "xl/compute/precision.h"
#include "xl/model/transformer_xl.h"
#include "xl/util/error.h"

using namespace xl;
using namespace xl::model;
using torch::Tensor;
using xl::test::make_model;
using xl::test::small_adaptive_config;
using xl::test::tiny_config;
using xl::test::tokens;

TEST(Model, AdaptiveSoftmaxIsANormalizedDistributionMatchingTheLoss) {
  ModelConfig c = small_adaptive_config();
  auto m = make_model(c);
  auto input = tokens(2, 6, c.n_token, 4), target = tokens(2, 6, c.n_token, 8);
  Memory mem = m->new_memory();
  ForwardOptions opts;
  opts.mem_len = 4;
  Memory mem2 = mem;
  auto nll = m->forward(input, target, mem, opts);
  auto h = m->hidden(input, mem2, opts).reshape({12, c.d_model});
  auto lp = m->log_probs(h);
  EXPECT_LT((lp.exp().sum(1) - 1).abs().max().item<double>(), 1e-10);
  auto want = -lp.gather(1, target.reshape({12, 1})).squeeze(1);
  EXPECT_LT((nll.reshape({12}) - want).abs().max().item<double>(), 1e-10);
  // Tied projections are the embedding's own tensors.
  EXPECT_EQ(m->crit->projections[1].data_ptr(), m->word_emb->projections[1].data_ptr());
  EXPECT_NE(m->crit->projections[0].data_ptr(), m->word_emb->projections[0].data_ptr());
}

TEST(Model, AdaptiveSoftmaxEqualsAnExplicitComputationOfTheClusters) {
  // Transformer-XL's projected adaptive softmax written out token by token from the parameters: the
  // head scores the shortlist and one column per tail cluster (cluster i is the i-th column from
  // the end); a tail token's log-probability is its cluster column's plus its place in the tail.
  ModelConfig c = small_adaptive_config();
  auto m = make_model(c);
  {
    torch::NoGradGuard g;
    for (auto& [name, t] : m->named_tensors())
      if (name != "pos_emb.inv_freq") t.add_(torch::randn(t.sizes(), t.options()) * 0.5);
  }
  std::map<std::string, Tensor> p;
  for (auto& [name, t] : m->named_tensors()) p[name] = t;
  const std::vector<int64_t> ends = {0, 10, 25, 40};
  auto proj = [&](int i) { return c.tie_projs[i] ? p["word_emb.emb_projs." + std::to_string(i)] : p["crit.out_projs." + std::to_string(i)]; };
  auto weight = [&](int i) { return p["word_emb.emb_layers." + std::to_string(i) + ".weight"]; };  // tie_weight
  auto bias = [&](int i) { return p["crit.out_layers." + std::to_string(i) + ".bias"]; };
  Tensor h = torch::randn({5, c.d_model}, torch::kFloat64);
  Tensor lp = m->log_probs(h);
  Tensor target = torch::tensor({3, 12, 24, 25, 39}, torch::kLong);
  Tensor nll = m->crit(h, target);
  auto log_softmax = [](const std::vector<double>& z) {
    double mx = *std::max_element(z.begin(), z.end()), s = 0;
    for (double v : z) s += std::exp(v - mx);
    std::vector<double> out;
    for (double v : z) out.push_back(v - mx - std::log(s));
    return out;
  };
  for (int64_t n = 0; n < 5; ++n) {
    // Scores of cluster i: W_i (h P_i) + b_i, and for the head the cluster rows after the shortlist.
    auto scores = [&](int i) {
      Tensor x = torch::matmul(h[n], proj(i));
      std::vector<double> z;
      for (int64_t r = 0; r < weight(i).size(0); ++r) z.push_back((weight(i)[r] * x).sum().item<double>() + bias(i)[r].item<double>());
      if (i == 0)
        for (int64_t k = 0; k < 2; ++k)
          z.push_back((p["crit.cluster_weight"][k] * x).sum().item<double>() + p["crit.cluster_bias"][k].item<double>());
      return log_softmax(z);
    };
    const auto head = scores(0);
    for (int64_t y = 0; y < c.n_token; ++y) {
      double want = 0;
      if (y < ends[1]) {
        want = head[y];
      } else {
        const int i = y < ends[2] ? 1 : 2;
        want = head[head.size() - i] + scores(i)[y - ends[i]];
      }
      EXPECT_NEAR(lp[n][y].item<double>(), want, 1e-10) << "token " << y;
      if (y == target[n].item<int64_t>()) {
        EXPECT_NEAR(nll[n].item<double>(), -want, 1e-10);
      }
    }
  }
}

// Without autograd the head's weight with the cluster rows appended is kept between calls; it must
// follow the weights when they change in place (an optimizer step) or get new data (set_data).
TEST(Model, AdaptiveSoftmaxWithoutAutogradFollowsItsWeights) {
  auto m = make_model(small_adaptive_config());
  Tensor h = torch::randn({3, 8}, torch::kFloat64);
  auto fresh = [&] { return m->log_probs(h).detach(); };  // with autograd: made anew
  auto kept = [&] {
    torch::NoGradGuard g;
    return m->log_probs(h);
  };
  const Tensor before = fresh();
  EXPECT_TRUE(torch::equal(kept(), before));
  EXPECT_TRUE(torch::equal(kept(), before));
  Tensor head = m->named_parameters()["word_emb.emb_layers.0.weight"];
  {
    torch::NoGradGuard g;
    head.add_(0.5);
    m->crit->cluster_bias.sub_(1.0);
  }
  const Tensor updated = fresh();
  EXPECT_FALSE(torch::equal(updated, before));
  EXPECT_TRUE(torch::equal(kept(), updated));
  head.set_data(head.detach().clone() * 2);
  const Tensor replaced = fresh();
  EXPECT_FALSE(torch::equal(replaced, updated));
  EXPECT_TRUE(torch::equal(kept(), replaced));
}

// Evaluation of an output layer too large for eval_logit_bytes goes through its vocabulary in
// blocks of columns; each token's loss is still -log_probs at its target (log_probs: every
// cluster's full log_softmax), with or without clusters, in float64 and float32, targets at the
// blocks' edges included.
TEST(Model, AdaptiveSoftmaxEvaluatesLargeLayersInBlocksOfColumns) {
  ModelConfig plain = tiny_config();
  plain.n_token = 23;
  for (const ModelConfig& c : {plain, small_adaptive_config()}) {
    for (torch::Dtype dtype : {torch::kFloat64, torch::kFloat32}) {
      SCOPED_TRACE(std::string(c.cutoffs.empty() ? "plain" : "adaptive") + (dtype == torch::kFloat64 ? " float64" : " float32"));
      auto m = make_model(c, dtype);
      torch::manual_seed(3);
      const Tensor h = torch::randn({12, c.d_model}, dtype);
      Tensor target = torch::arange(12, torch::kLong) * 3 % c.n_token;
      target[0] = 0;
      target[11] = c.n_token - 1;
      torch::NoGradGuard g;
      const Tensor want = -m->log_probs(h).gather(1, target.unsqueeze(1)).squeeze(1);
      const Tensor whole = m->crit(h, target);
      m->crit->eval_logit_bytes = 4 * 12 * 4;  // blocks of 4 columns at 12 rows (fewer rows in a tail)
      const Tensor blocked = m->crit(h, target);
      const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-5;
      EXPECT_LT((whole - want).abs().max().item<double>(), tol);
      EXPECT_LT((blocked - want).abs().max().item<double>(), tol);
      EXPECT_FALSE(torch::equal(blocked, whole)) << "the blocked path did not run";
    }
  }
}

TEST(Model, AdaptiveSoftmaxGradientsMatchTheFullLogProbabilities) {
  // The loss takes one log-probability per token from each row's log-sum-exp; its gradients must be
  // those of the full distribution (log_probs: every cluster's log_softmax, concatenated) at the
  // target, for the hidden states and every parameter of the softmax; also when the output layers
  // go in blocks of 4 columns (train_logit_bytes), with and without clusters.
  ModelConfig plain = tiny_config();
  plain.n_token = 23;
  for (const ModelConfig& c : {small_adaptive_config(), plain}) {
    for (bool blocked : {false, true}) {
      SCOPED_TRACE(std::string(c.cutoffs.empty() ? "plain" : "adaptive") + (blocked ? ", blocked" : ""));
      auto m = make_model(c);
      if (blocked) m->crit->train_logit_bytes = 4 * 9 * 4;
      Tensor h = torch::randn({9, c.d_model}, torch::kFloat64).requires_grad_();
      Tensor target = torch::tensor({3, 12, 24, 25, 39, 0, 10, 30, 9}, torch::kLong) % c.n_token;
      Tensor weights = torch::rand({9}, torch::kFloat64);
      auto grads = [&](const Tensor& loss) {
        m->zero_grad();
        h.mutable_grad() = Tensor();
        loss.backward();
        std::vector<Tensor> g{h.grad().clone()};
        for (auto& p : m->parameters())
          if (p.grad().defined()) g.push_back(p.grad().clone());
        return g;
      };
      auto got = grads((m->crit(h, target) * weights).sum());
      auto want = grads((-m->log_probs(h).gather(1, target.unsqueeze(1)).squeeze(1) * weights).sum());
      ASSERT_EQ(got.size(), want.size());
      ASSERT_GT(got.size(), 2u);
      for (size_t i = 0; i < got.size(); ++i) EXPECT_LT((got[i] - want[i]).abs().max().item<double>(), 1e-12) << i;
    }
  }
}

// The gradients of the adaptive softmax's parameters, tied to the input embedding or not, with one
// output layer sliced per cluster (div_val 1) or one per cluster, and with a cluster that no target
// reaches: as LibTorch's own slices, concatenations and log_softmax give them, written here from
// the module's tensors as Transformer-XL's ProjectedAdaptiveLogSoftmax computes its loss (and, at
// div_val 1, the input embedding's rows, whose gradient the model makes sparse when tied).
TEST(Model, AdaptiveSoftmaxParameterGradientsMatchAnExplicitLibTorchLoss) {
  for (int64_t div_val : {1, 2}) {
    for (bool tied : {true, false}) {
      for (bool every_cluster : {true, false}) {
        SCOPED_TRACE("div_val " + std::to_string(div_val) + (tied ? ", tied" : ", untied") +
                     (every_cluster ? "" : ", the last cluster without targets"));
        ModelConfig c = small_adaptive_config();
        c.div_val = div_val;
        c.tie_weight = tied;
        auto m = make_model(c);
        m->train();
        const auto& crit = m->crit;
        Tensor h = torch::randn({9, c.d_model}, torch::kFloat64).requires_grad_();
        Tensor target = every_cluster ? torch::tensor({3, 12, 24, 25, 39, 0, 10, 30, 9}, torch::kLong)
                                      : torch::tensor({3, 12, 24, 2, 19, 0, 10, 20, 9}, torch::kLong);
        Tensor input = torch::tensor({{1, 30, 12}, {39, 5, 22}}, torch::kLong);  // the embedding's own use
        Tensor weights = torch::rand({9}, torch::kFloat64), emb_weights = torch::randn({2, 3, c.d_model}, torch::kFloat64);
        auto explicit_nll = [&] {
          const auto& ends = crit->cutoff_ends;
          auto rows = [&](int64_t i) {  // weight and bias of cluster i's rows
            const auto& layer = crit->layers[div_val == 1 ? 0 : static_cast<size_t>(i)];
            if (div_val != 1) return std::make_pair(layer->weight, layer->bias);
            return std::make_pair(layer->weight.slice(0, ends[i], ends[i + 1]), layer->bias.slice(0, ends[i], ends[i + 1]));
          };
          auto log_softmax_of = [&](int64_t i, const Tensor& w, const Tensor& b) {
            const Tensor& proj = crit->projections[static_cast<size_t>(i)];
            return torch::log_softmax(torch::matmul(proj.defined() ? torch::matmul(h, proj) : h, w.t()) + b, 1);
          };
          auto [w0, b0] = rows(0);
          Tensor head = log_softmax_of(0, torch::cat({w0, crit->cluster_weight}), torch::cat({b0, crit->cluster_bias}));
          std::vector<Tensor> nll;
          for (int64_t n = 0; n < 9; ++n) {
            const int64_t y = target[n].item<int64_t>();
            int64_t i = 0;
            while (y >= ends[i + 1]) ++i;
            if (i == 0) {
              nll.push_back(-head[n][y]);
            } else {
              auto [w, b] = rows(i);
              nll.push_back(-head[n][head.size(1) - i] - log_softmax_of(i, w, b)[n][y - ends[i]]);
            }
          }
          return torch::stack(nll);
        };
        // The input embedding's rows, scaled (div_val 1 here has no projection).
        auto explicit_embedding = [&] {
          const Tensor& w = m->word_emb->embeddings[0]->weight;
          return w.index_select(0, input.reshape(-1)).view({2, 3, c.d_model}) * std::sqrt(static_cast<double>(c.d_model));
        };
        auto grads = [&](const Tensor& nll, const Tensor& embedded) {
          m->zero_grad();
          h.mutable_grad() = Tensor();
          ((nll * weights).sum() + (embedded * emb_weights).sum()).backward();
          std::vector<Tensor> g{h.grad().clone()};
          for (auto& p : m->parameters()) {
            if (!p.grad().defined()) continue;
            EXPECT_FALSE(p.grad().is_sparse());
            g.push_back(p.grad().clone());
          }
          return g;
        };
        auto got = grads(m->crit(h, target), m->word_emb(input));
        auto want = grads(explicit_nll(), div_val == 1 ? explicit_embedding() : m->word_emb(input));
        ASSERT_EQ(got.size(), want.size());
        ASSERT_GT(got.size(), 4u);
        for (size_t i = 0; i < got.size(); ++i) EXPECT_LT((got[i] - want[i]).abs().max().item<double>(), 1e-12) << i;
      }
    }
  }
}
