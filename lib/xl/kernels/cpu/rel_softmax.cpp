#include "xl/kernels/cpu/rel_softmax.h"

#include "xl/compute/kernel_choice.h"
#include "xl/compute/parallel.h"
#include "xl/kernels/cpu/row_kernels.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

// The element loops below are written to vectorize; -O2 alone does not if-convert them.
#ifndef __clang__  // clang has no per-file optimize pragma (and vectorizes these at -O2)
#pragma GCC optimize("O3")
#endif

namespace xl::kernels {

std::vector<int64_t> pack_key_blocks(const std::vector<KeyBlock>& blocks) {
  std::vector<int64_t> v;
  for (const KeyBlock& kb : blocks) v.insert(v.end(), {kb.col, kb.len, kb.d_max, kb.table});
  return v;
}

std::vector<KeyBlock> unpack_key_blocks(const std::vector<int64_t>& packed) {
  std::vector<KeyBlock> blocks;
  for (size_t i = 0; i + 3 < packed.size(); i += 4)
    blocks.push_back({packed[i], packed[i + 1], packed[i + 2], packed[i + 3]});
  return blocks;
}

namespace {

// Shapes of one call: N x T queries over K keys; per block the column, length and table size.
struct Layout {
  int64_t n = 0, t = 0, k = 0;
  std::vector<KeyBlock> blocks;
};

template <typename T>
__attribute__((always_inline)) inline void add_into(T* dst, const T* src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] += src[j];
}

// ---- forward -----------------------------------------------------------------------------------

// Scores of rows [r0, r1) into out (scaled, shifted, masked), then softmax over those rows.
template <typename T>
void forward_rows(const Layout& L, const T* ac, const std::vector<const T*>& bds, const bool* mask, T scale, T* out,
                  int64_t r0, int64_t r1) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t n = r / L.t, i = r % L.t;
    const T* a = ac + r * L.k;
    T* s = out + r * L.k;
    for (size_t b = 0; b < L.blocks.size(); ++b) {
      const KeyBlock& blk = L.blocks[b];
      // The relative shift, in place: element (n, i, j) of the block reads flat n*T*P + i*(P-1) + j + T-1.
      const T* src = bds[b] + n * L.t * blk.table + i * (blk.table - 1) + L.t - 1;
      rows::add_scale(a + blk.col, src, s + blk.col, blk.len, scale);
    }
    if (mask) {
      const bool* mrow = mask + i * L.k;
      for (int64_t j = 0; j < L.k; ++j)
        if (mrow[j]) s[j] = neg_inf;
    }
  }
}

torch::Tensor fused_forward(const Layout& L, const torch::Tensor& ac, const std::vector<torch::Tensor>& bds,
                            const torch::Tensor& mask, double scale) {
  torch::Tensor acc = ac.contiguous();
  std::vector<torch::Tensor> bdc;
  for (const auto& b : bds) bdc.push_back(b.contiguous());
  torch::Tensor m = mask.defined() ? mask.to(torch::kBool).contiguous() : mask;
  TORCH_CHECK(!m.defined() || (m.dim() == 2 && m.size(0) == L.t && m.size(1) == L.k), "mask must be [T, K]");
  torch::Tensor out = torch::empty({L.n, L.t, L.k}, acc.options());
  const int64_t rows = L.n * L.t;
  // Rows in chunks that stay in cache between the score pass and the softmax pass.
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(64, (1 << 16) / std::max<int64_t>(L.k, 1)));
  const int64_t chunks = (rows + chunk - 1) / chunk;
  AT_DISPATCH_FLOATING_TYPES(acc.scalar_type(), "relative_attention_probs", [&] {
    std::vector<const scalar_t*> bp;
    for (const auto& b : bdc) bp.push_back(b.data_ptr<scalar_t>());
    const scalar_t* ap = acc.data_ptr<scalar_t>();
    const bool* mp = m.defined() ? m.data_ptr<bool>() : nullptr;
    scalar_t* op = out.data_ptr<scalar_t>();
    compute::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t r0 = c * chunk, r1 = std::min(rows, r0 + chunk);
        forward_rows<scalar_t>(L, ap, bp, mp, static_cast<scalar_t>(scale), op, r0, r1);
      }
    });
  });
  // LibTorch's softmax (vectorized exp, its own threads) in place over the scores.
  at::_softmax_out(out, out, -1, false);
  return out;
}

// ---- backward ----------------------------------------------------------------------------------

// d(score)/d(ac) = gs, and the exact adjoint of each block's strided read of its table.
template <typename T>
void backward_batch(const Layout& L, const T* p, const T* g, T* gac, const std::vector<T*>& gbd, T scale, int64_t n) {
  std::vector<int64_t> cursor(L.blocks.size(), 0);
  for (int64_t i = 0; i < L.t; ++i) {
    const int64_t r = n * L.t + i;
    const T* pr = p + r * L.k;
    const T* gr = g + r * L.k;
    T* gs = gac + r * L.k;
    rows::softmax_grad(pr, gr, gs, L.k, rows::dot(gr, pr, L.k), scale);
    for (size_t b = 0; b < L.blocks.size(); ++b) {
      const KeyBlock& blk = L.blocks[b];
      T* tab = gbd[b] + n * L.t * blk.table;
      const int64_t start = i * (blk.table - 1) + L.t - 1;
      int64_t& cur = cursor[b];
      if (start > cur) std::memset(tab + cur, 0, sizeof(T) * static_cast<size_t>(start - cur));
      const T* src = gs + blk.col;
      const int64_t overlap = std::min(std::max<int64_t>(cur - start, 0), blk.len);
      add_into(tab + start, src, overlap);
      std::memcpy(tab + start + overlap, src + overlap, sizeof(T) * static_cast<size_t>(blk.len - overlap));
      cur = std::max(cur, start + blk.len);
    }
  }
  for (size_t b = 0; b < L.blocks.size(); ++b) {
    const int64_t total = L.t * L.blocks[b].table;
    T* tab = gbd[b] + n * total;
    if (cursor[b] < total) std::memset(tab + cursor[b], 0, sizeof(T) * static_cast<size_t>(total - cursor[b]));
  }
}

class RelativeAttentionProbs : public torch::autograd::Function<RelativeAttentionProbs> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& ac,
                               torch::TensorList bds, const std::vector<KeyBlock>& blocks,
                               const torch::Tensor& mask, double scale) {
    Layout L{ac.size(0), ac.size(1), ac.size(2), blocks};
    torch::Tensor p = fused_forward(L, ac, bds.vec(), mask, scale);
    ctx->save_for_backward({p});
    ctx->saved_data["blocks"] = pack_key_blocks(blocks);
    ctx->saved_data["scale"] = scale;
    return p;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto p = ctx->get_saved_variables()[0];
    double scale = ctx->saved_data["scale"].toDouble();

    Layout L{p.size(0), p.size(1), p.size(2), unpack_key_blocks(ctx->saved_data["blocks"].toIntVector())};
    torch::Tensor g = grad_out[0].contiguous();
    torch::Tensor gac = torch::empty_like(p);
    std::vector<torch::Tensor> gbd;
    for (const auto& blk : L.blocks) gbd.push_back(torch::empty({L.n, L.t, blk.table}, p.options()));
    AT_DISPATCH_FLOATING_TYPES(p.scalar_type(), "relative_attention_probs_backward", [&] {
      std::vector<scalar_t*> gb;
      for (auto& t : gbd) gb.push_back(t.data_ptr<scalar_t>());
      const scalar_t* pp = p.data_ptr<scalar_t>();
      const scalar_t* gp = g.data_ptr<scalar_t>();
      scalar_t* ga = gac.data_ptr<scalar_t>();
      compute::parallel_for(0, L.n, 1, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n) backward_batch<scalar_t>(L, pp, gp, ga, gb, static_cast<scalar_t>(scale), n);
      });
    });
    torch::autograd::variable_list grads;
    grads.push_back(gac);  // ac
    for (auto& t : gbd) grads.push_back(t);
    grads.push_back(torch::Tensor());  // blocks
    grads.push_back(torch::Tensor());  // mask
    grads.push_back(torch::Tensor());  // scale
    return grads;
  }
};

// Softmax in float32 whose probabilities come back in the products' dtype (bf16/fp16); the
// backward reads those same probabilities, in float32 arithmetic, as Megatron's fused softmax
// does. A layer then keeps one low-precision copy of its probabilities for the backward, where
// autocast's softmax and the product after it kept a float32 one and a low-precision one.
class LowPrecisionSoftmax : public torch::autograd::Function<LowPrecisionSoftmax> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& scores,
                               c10::ScalarType dtype) {
    torch::Tensor p = torch::softmax(scores, -1).to(dtype);
    ctx->save_for_backward({p});
    return p;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const torch::Tensor p = ctx->get_saved_variables()[0].to(torch::kFloat);
    return {torch::_softmax_backward_data(grad_out[0].to(torch::kFloat), p, -1, torch::kFloat), torch::Tensor()};
  }
};

// Block b's positional scores [N, T, P] as the block's [N, T, len] scores: query i reads its
// table at j + T - 1 - i, a strided view (Transformer-XL's relative shift), so autograd keeps
// nothing of the table for the backward; a gather would keep all of it, one more score-sized
// tensor per layer. Entries past the table (a query's future) read the next row or a pad, and
// the mask covers them. Without gradients the view reads the table itself, rows P - 1 apart (a
// query's last key shares its entry with the next query's first, a future one). Differentiated,
// such overlapping rows would make autograd index every entry, so there a zero column after each
// row makes them P + 1 apart. Needs len <= P.
torch::Tensor shifted_positional_scores(const torch::Tensor& bd, const KeyBlock& blk) {
  const int64_t n = bd.size(0), t = bd.size(1), p = blk.table;
  TORCH_CHECK(bd.size(2) == p && blk.len <= p, "a key block's table must cover its keys");
  if (!bd.requires_grad()) {
    const torch::Tensor table = bd.contiguous();
    return table.as_strided({n, t, blk.len}, {t * p, p - 1, 1}, table.storage_offset() + t - 1);
  }
  const torch::Tensor padded = torch::constant_pad_nd(bd, {0, 1});
  return padded.as_strided({n, t, blk.len}, {t * (p + 1), p, 1}, padded.storage_offset() + t - 1);
}

// A [T, K] mask as a boolean [1, T, K] on `device`, to mask every head's scores at once.
torch::Tensor heads_mask(const torch::Tensor& mask, const torch::Device& device) {
  return mask.to(torch::kBool).to(device).unsqueeze(0);
}

// Any device, any dtype, differentiable by autograd: the relative shift as a view; masked scores
// are -inf; the softmax runs in float32 at least (its backward too).
torch::Tensor generic_probs(torch::Tensor ac, std::vector<torch::Tensor> bds, const std::vector<KeyBlock>& blocks,
                            const torch::Tensor& mask, double scale) {
  const auto dtype = ac.scalar_type();
  const auto compute = dtype == torch::kDouble ? torch::kDouble : torch::kFloat;
  // Scores nothing else holds and autograd does not track (evaluation) take the positional scores
  // in place, each block's table let go once added: two score-sized tensors fewer at the peak.
  bool in_place = dtype == compute && !ac.requires_grad() && ac.use_count() == 1 && ac.storage().use_count() == 1;
  for (const auto& bd : bds) in_place = in_place && !bd.requires_grad();
  std::vector<torch::Tensor> parts;
  for (size_t b = 0; b < blocks.size(); ++b) {
    const KeyBlock& blk = blocks[b];
    torch::Tensor content = ac.narrow(2, blk.col, blk.len).to(compute);
    const torch::Tensor positional = shifted_positional_scores(std::exchange(bds[b], torch::Tensor()), blk);
    // In bf16/fp16 `content` is a float32 copy of its own, to add into.
    if (in_place) content.add_(positional);
    else parts.push_back(dtype == compute ? content + positional : content.add_(positional));
  }
  const torch::Device device = ac.device();
  torch::Tensor scores = std::move(ac);
  if (!in_place) {  // the sums hold all that is left of the inputs
    scores.reset();
    scores = parts.size() == 1 ? std::move(parts[0]) : torch::cat(parts, 2);
    parts.clear();
  }
  // Scaled and masked in place: nothing keeps the sum for the backward, and score-sized
  // temporaries are what a GPU runs out of first.
  if (scale != 1.0) scores.mul_(scale);
  if (mask.defined()) scores.masked_fill_(heads_mask(mask, device), -INFINITY);
  return dtype == compute ? torch::softmax(scores, -1) : LowPrecisionSoftmax::apply(scores, dtype);
}

}  // namespace

namespace {

// shift(BD) of every key block, -inf where masked, written in one pass per block (the shift reads
// each table through the overlapping view, which only a backward of our own may do). The backward
// writes each block's masked gradient through the same shift into a zeroed table with rows P + 1
// apart, so the overlapping entries (a query's future) land in the pad column and nothing overlaps.
// Autograd's own pad, as_strided and masked_fill made about eight score-sized passes, forward and
// backward, where this makes four (on a GPU theirs were a large share of a bf16 training step:
// bench/HISTORY.md, "GPU runs", the profile).
class PositionalBias : public torch::autograd::Function<PositionalBias> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::TensorList bds,
                               const std::vector<KeyBlock>& blocks, const torch::Tensor& mask, at::ScalarType dtype) {
    const int64_t n = bds[0].size(0), t = bds[0].size(1), k = blocks.back().col + blocks.back().len;
    const torch::Device device = bds[0].device();
    torch::Tensor bias = torch::empty({n, t, k}, bds[0].options().dtype(dtype));
    const torch::Tensor masked = mask.defined() ? heads_mask(mask, device) : torch::Tensor();
    // Tables in the bias's dtype (autocast's products are) are masked as they are copied; others
    // are converted first and masked after.
    const bool same_dtype = bds[0].scalar_type() == dtype;
    const torch::Tensor minus_inf = torch::full({}, -INFINITY, bds[0].options().dtype(dtype));
    for (size_t b = 0; b < blocks.size(); ++b) {
      const KeyBlock& blk = blocks[b];
      const torch::Tensor shifted = shifted_positional_scores(bds[b].detach(), blk);
      torch::Tensor out = bias.narrow(2, blk.col, blk.len);
      if (masked.defined() && same_dtype) at::where_out(out, masked.narrow(2, blk.col, blk.len), minus_inf, shifted);
      else out.copy_(shifted);
    }
    if (masked.defined() && !same_dtype) bias.masked_fill_(masked, -INFINITY);
    ctx->saved_data["blocks"] = pack_key_blocks(blocks);
    ctx->saved_data["table_dtype"] = static_cast<int64_t>(bds[0].scalar_type());
    if (masked.defined()) ctx->save_for_backward({masked});
    return bias;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto blocks = unpack_key_blocks(ctx->saved_data["blocks"].toIntVector());
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["table_dtype"].toInt());
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor masked = saved.empty() ? torch::Tensor() : saved[0];
    const torch::Tensor& grad = grad_out[0];
    const int64_t n = grad.size(0), t = grad.size(1);
    torch::autograd::variable_list grads;
    for (const KeyBlock& blk : blocks) {
      const int64_t p = blk.table;
      torch::Tensor table = torch::zeros({n, t, p + 1}, grad.options().dtype(dtype));
      // The shift's view writes each score's gradient to its own table element, so the mask is
      // applied there in place (no score-sized masked copy of the gradient).
      torch::Tensor shifted = table.as_strided({n, t, blk.len}, {t * (p + 1), p, 1}, t - 1);
      shifted.copy_(grad.narrow(2, blk.col, blk.len));
      if (masked.defined()) shifted.masked_fill_(masked.narrow(2, blk.col, blk.len), 0);
      grads.push_back(table.narrow(2, 0, p));
    }
    grads.push_back(torch::Tensor());  // blocks
    grads.push_back(torch::Tensor());  // mask
    grads.push_back(torch::Tensor());  // dtype
    return grads;
  }
};

}  // namespace

torch::Tensor relative_positional_bias(std::vector<torch::Tensor> bds, const std::vector<KeyBlock>& blocks,
                                       const torch::Tensor& mask, at::ScalarType dtype) {
  TORCH_CHECK(bds.size() == blocks.size() && !blocks.empty(), "one positional score tensor per key block");
  return PositionalBias::apply(torch::TensorList(bds), blocks, mask, dtype);
}

torch::Tensor relative_attention_probs(torch::Tensor ac, std::vector<torch::Tensor> bds,
                                       const std::vector<KeyBlock>& blocks, const torch::Tensor& mask,
                                       double scale) {
  TORCH_CHECK(bds.size() == blocks.size(), "one positional score tensor per key block");
  // The kernel reads every score tensor in ac's type: under autocast a variant's content scores may
  // be fp32 while its positional scores are bf16.
  bool fused = compute::cpu_kernel_allowed(ac) && (ac.scalar_type() == torch::kFloat || ac.scalar_type() == torch::kDouble);
  for (const auto& bd : bds) fused = fused && bd.scalar_type() == ac.scalar_type();
  if (!fused) return generic_probs(std::move(ac), std::move(bds), blocks, mask, scale);
  return RelativeAttentionProbs::apply(ac, torch::TensorList(bds), blocks, mask, scale);
}

}  // namespace xl::kernels
