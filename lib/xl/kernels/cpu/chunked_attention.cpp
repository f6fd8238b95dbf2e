#include "xl/kernels/cpu/chunked_attention.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <vector>

#include "xl/compute/blas.h"
#include "xl/compute/kernel_choice.h"
#include "xl/compute/parallel.h"
#include "xl/compute/precision.h"
#include "xl/kernels/cpu/attention_blocks.h"
#include "xl/kernels/cpu/product_operands.h"
#include "xl/kernels/cpu/row_layout.h"

namespace xl::kernels {
namespace {

using namespace blocked;

// t [B, ...] summed over B in one parallel pass, batch by batch in order (t.sum(0) clears its
// output in a pass of its own and reduced the base model's table gradients several times slower).
torch::Tensor sum_over_batch(const torch::Tensor& t) {
  const int64_t batch = t.size(0);
  if (batch == 1) return t[0];
  const int64_t n = t.numel() / batch;
  torch::Tensor out = torch::empty(t.sizes().slice(1), t.options());
  const float* in = t.data_ptr<float>();
  float* o = out.data_ptr<float>();
  compute::parallel_for(0, n, 1 << 14, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) o[i] = in[i] + in[n + i];
    for (int64_t b = 2; b < batch; ++b)
      for (int64_t i = i0; i < i1; ++i) o[i] += in[b * n + i];
  });
  return out;
}

// The extras as a flat tensor list (for autograd) and back: per component query, key, log weights;
// then the persistent key and value; then the table biases. spec: {M, hard, persistent, biases},
// coefs: the components' coefficients.
struct PackedExtras {
  std::vector<torch::Tensor> tensors;
  std::vector<int64_t> spec;
  std::vector<double> coefs;
};

PackedExtras pack(const AttentionExtras& e) {
  PackedExtras p;
  for (const auto& c : e.mixture) {
    p.tensors.insert(p.tensors.end(), {c.query, c.key, c.log_weight});
    p.coefs.push_back(c.coef);
  }
  const bool persistent = e.persistent_key.defined();
  if (persistent) p.tensors.insert(p.tensors.end(), {e.persistent_key, e.persistent_value});
  p.tensors.insert(p.tensors.end(), e.table_bias.begin(), e.table_bias.end());
  p.spec = {static_cast<int64_t>(e.mixture.size()), e.hard ? 1 : 0, persistent ? 1 : 0,
            static_cast<int64_t>(e.table_bias.size())};
  return p;
}

AttentionExtras unpack(const std::vector<torch::Tensor>& t, const std::vector<int64_t>& spec,
                       const std::vector<double>& coefs) {
  AttentionExtras e;
  size_t at = 0;
  for (int64_t m = 0; m < spec[0]; ++m, at += 3) e.mixture.push_back({t[at], t[at + 1], t[at + 2], coefs[m]});
  e.hard = spec[1] != 0;
  if (spec[2] != 0) e.persistent_key = t[at], e.persistent_value = t[at + 1], at += 2;
  e.table_bias.assign(t.begin() + static_cast<int64_t>(at), t.begin() + static_cast<int64_t>(at) + spec[3]);
  return e;
}

// A component key [B, K, H, dh] whose rows the kernel can stride through (kv.select(2, 0) can).
torch::Tensor strided_rows(const torch::Tensor& key) { return rows_are_strided(key) ? key : key.contiguous(); }

AttentionExtras contiguous(const AttentionExtras& e) {
  AttentionExtras c;
  for (const auto& m : e.mixture)
    c.mixture.push_back({m.query.contiguous(), strided_rows(m.key), m.log_weight.contiguous(), m.coef});
  c.hard = e.hard;
  if (e.persistent_key.defined())
    c.persistent_key = e.persistent_key.contiguous(), c.persistent_value = e.persistent_value.contiguous();
  for (const auto& b : e.table_bias) c.table_bias.push_back(b.contiguous());
  return c;
}

Operands operands(const torch::Tensor& q_u, const torch::Tensor& q_v, const torch::Tensor& kv,
                  const std::vector<torch::Tensor>& tables, const torch::Tensor& mask, double scale,
                  const AttentionExtras& e, bool bf16) {
  Operands x;
  x.bf16 = bf16;
  x.q_u = q_u.data_ptr<float>(), x.q_v = q_v.data_ptr<float>(), x.kv = kv.data_ptr<float>();
  x.mask = mask.data_ptr<bool>();
  x.scale = static_cast<float>(scale);
  for (const auto& t : tables) x.tables.push_back(t.data_ptr<float>());
  for (const auto& c : e.mixture)
    x.mixture.push_back({c.query.data_ptr<float>(), c.key.data_ptr<float>(), c.log_weight.data_ptr<float>(),
                         row_stride(c.key), stream_stride(c.key), static_cast<float>(c.coef)});
  x.hard = e.hard;
  if (e.persistent_key.defined())
    x.persistent_key = e.persistent_key.data_ptr<float>(), x.persistent_value = e.persistent_value.data_ptr<float>();
  for (const auto& b : e.table_bias) x.table_bias.push_back(b.data_ptr<float>());
  return x;
}

// Which mixture components read the same tensors, for their gradients to share a buffer: per
// component, 1 if its query is q_u itself (then q_u's gradient is theirs: the kernel writes none of
// its own for a mixture), then per component the first component whose key is its key. Only the
// same tensor counts: a view of the same memory is another input to autograd.
std::vector<int64_t> shared_operands(const torch::Tensor& q_u, const AttentionExtras& e) {
  const size_t count = e.mixture.size();
  std::vector<int64_t> shared(2 * count);
  for (size_t m = 0; m < count; ++m) {
    shared[m] = e.mixture[m].query.is_same(q_u) ? 1 : 0;
    size_t first = 0;
    while (!e.mixture[first].key.is_same(e.mixture[m].key)) ++first;
    shared[count + m] = static_cast<int64_t>(first);
  }
  return shared;
}

class ChunkedRelativeAttention : public torch::autograd::Function<ChunkedRelativeAttention> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q_u,
                               const torch::Tensor& q_v, const torch::Tensor& kv, torch::TensorList tables,
                               torch::TensorList extra_tensors, const std::vector<int64_t>& keys,
                               const std::vector<int64_t>& heads, const torch::Tensor& mask, double scale,
                               const std::vector<int64_t>& spec, const std::vector<double>& coefs) {
    RECORD_FUNCTION("xl::chunked_attention", std::vector<c10::IValue>());
    const std::vector<torch::Tensor> table_list = tables.vec(), extra_list = extra_tensors.vec();
    const AttentionExtras extras = unpack(extra_list, spec, coefs);
    const Geometry g = geometry(q_u, kv, table_list, unpack_key_blocks(keys), heads, mask, extras);
    torch::Tensor out = torch::empty_like(q_u);
    const bool keep = compute::attention_probs() == compute::AttentionProbs::kKeep;
    torch::Tensor probs = torch::empty({keep ? g.n() : 0, g.t, g.ld_probs()}, q_u.options());
    torch::Tensor resp = torch::empty({std::max<int64_t>(g.components - 1, 0), g.n(), g.t, g.k}, q_u.options());
    // autocast's state is per thread: backward is told
    const bool bf16 = takes_bf16_operands(g.t);
    forward_blocks(g, operands(q_u, q_v, kv, table_list, mask, scale, extras, bf16), out.data_ptr<float>(),
                   keep ? probs.data_ptr<float>() : nullptr, g.components > 1 ? resp.data_ptr<float>() : nullptr);
    std::vector<torch::Tensor> saved = {q_u, q_v, kv, probs, resp};
    saved.insert(saved.end(), table_list.begin(), table_list.end());
    saved.insert(saved.end(), extra_list.begin(), extra_list.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["keys"] = keys;
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["mask"] = mask;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["spec"] = spec;
    ctx->saved_data["coefs"] = coefs;
    ctx->saved_data["bf16"] = bf16;
    ctx->saved_data["shared"] = shared_operands(q_u, extras);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    RECORD_FUNCTION("xl::chunked_attention_backward", std::vector<c10::IValue>());
    auto s = ctx->get_saved_variables();
    const torch::Tensor &q_u = s[0], &q_v = s[1], &kv = s[2], &probs = s[3], &resp = s[4];
    const auto keys = unpack_key_blocks(ctx->saved_data["keys"].toIntVector());
    const auto tables_end = s.begin() + 5 + static_cast<int64_t>(keys.size());
    const std::vector<torch::Tensor> tables(s.begin() + 5, tables_end), extra_list(tables_end, s.end());
    const AttentionExtras extras =
        unpack(extra_list, ctx->saved_data["spec"].toIntVector(), ctx->saved_data["coefs"].toDoubleVector());
    const torch::Tensor mask = ctx->saved_data["mask"].toTensor();
    const Geometry g = geometry(q_u, kv, tables, keys, ctx->saved_data["heads"].toIntVector(), mask, extras);
    // Every gradient starts uninitialised: backward_blocks clears what it accumulates into.
    const auto shared = ctx->saved_data["shared"].toIntVector();
    const size_t count = extras.mixture.size();
    const bool components_take_q_u = std::find(shared.begin(), shared.begin() + count, 1) != shared.begin() + count;
    // A mixture's content reads its components' queries, not q_u: q_u's gradient is theirs or none.
    torch::Tensor d_q_u;
    if (count == 0 || g.persistent > 0 || components_take_q_u) d_q_u = torch::empty_like(q_u);
    // kv's gradient in kv's own strides (backward writes it through the same geometry): the keys
    // and values of a wider projections buffer (MGK's) need no contiguous copy for autograd.
    torch::Tensor d_q_v = torch::empty_like(q_v), d_kv = torch::empty_strided(kv.sizes(), kv.strides(), kv.options());
    Gradients d;
    d.q_u = d_q_u.defined() ? d_q_u.data_ptr<float>() : nullptr;
    d.q_v = d_q_v.data_ptr<float>(), d.kv = d_kv.data_ptr<float>();
    std::vector<torch::Tensor> d_tables_per_batch, d_bias_per_batch;
    for (const torch::Tensor& t : tables) {
      d_tables_per_batch.push_back(torch::empty({g.batch, t.size(0), g.heads, g.dh}, t.options()));
      d.tables_per_batch.push_back(d_tables_per_batch.back().data_ptr<float>());
    }
    // Per component: its query's and key's gradients (undefined where shared), its log weights' per batch.
    std::vector<torch::Tensor> d_components;
    auto grad_of = [&](torch::Tensor t, std::vector<float*>* into) {
      d_components.push_back(t);
      into->push_back(t.data_ptr<float>());
    };
    bool q_u_written = false;
    for (size_t m = 0; m < count; ++m) {
      // A shared tensor's gradient goes to its first slot (q_u's for queries); the others get none.
      if (shared[m] != 0) {
        d_components.emplace_back();
        d.query.push_back(d.q_u);
        d.adds_query.push_back(q_u_written);
        q_u_written = true;
      } else {
        grad_of(torch::empty_like(q_u), &d.query);
        d.adds_query.push_back(false);
      }
      const auto first = static_cast<size_t>(shared[count + m]);
      if (first == m) {
        grad_of(torch::empty({g.batch, g.k, g.heads, g.dh}, q_u.options()), &d.key);
      } else {
        d_components.emplace_back();
        d.key.push_back(d.key[first]);
      }
      d.first_with_key.push_back(first == m);
      grad_of(torch::empty({g.batch, g.heads}, q_u.options()), &d.log_weight_per_batch);
    }
    torch::Tensor d_pk, d_pv;
    if (g.persistent > 0) {
      d_pk = torch::empty({g.batch, g.heads, g.persistent, g.dh}, q_u.options());
      d_pv = torch::empty_like(d_pk);
      d.persistent_key = d_pk.data_ptr<float>(), d.persistent_value = d_pv.data_ptr<float>();
    }
    for (size_t b = 0; b < extras.table_bias.size(); ++b) {
      d_bias_per_batch.push_back(torch::empty({g.batch, g.heads, keys[b].table}, q_u.options()));
      d.bias_per_batch.push_back(d_bias_per_batch.back().data_ptr<float>());
    }
    torch::Tensor go = grad_out[0].contiguous();
    backward_blocks(g,
                    operands(q_u, q_v, kv, tables, mask, ctx->saved_data["scale"].toDouble(), extras,
                             ctx->saved_data["bf16"].toBool()),
                    probs.numel() > 0 ? probs.data_ptr<float>() : nullptr,
                    g.components > 1 ? resp.data_ptr<float>() : nullptr, go.data_ptr<float>(), d);
    torch::autograd::variable_list grads = {d_q_u, d_q_v, d_kv};
    for (const torch::Tensor& t : d_tables_per_batch) grads.push_back(sum_over_batch(t));
    for (size_t m = 0; m < count; ++m)
      grads.insert(grads.end(), {d_components[3 * m], d_components[3 * m + 1], sum_over_batch(d_components[3 * m + 2])});
    if (g.persistent > 0) grads.insert(grads.end(), {sum_over_batch(d_pk), sum_over_batch(d_pv)});
    for (const torch::Tensor& t : d_bias_per_batch) grads.push_back(sum_over_batch(t));
    grads.insert(grads.end(), 6, torch::Tensor());
    return grads;  // keys, heads, mask, scale, spec, coefs: none
  }
};

}  // namespace

bool chunked_attention_usable(const torch::Tensor& q, const AttentionExtras& extras) {
  if (!compute::blas().sgemm || q.scalar_type() != torch::kFloat || !compute::cpu_kernel_allowed(q) || extras.mixture.size() > 16)
    return false;
  auto ok = [&](const torch::Tensor& t) { return !t.defined() || t.scalar_type() == torch::kFloat; };
  for (const auto& c : extras.mixture)
    if (!ok(c.query) || !ok(c.key) || !ok(c.log_weight)) return false;
  for (const auto& b : extras.table_bias)
    if (!ok(b)) return false;
  return ok(extras.persistent_key) && ok(extras.persistent_value);
}

torch::Tensor chunked_relative_attention(const torch::Tensor& q_u, const torch::Tensor& q_v, const torch::Tensor& kv,
                                         const std::vector<torch::Tensor>& tables,
                                         const std::vector<KeyBlock>& blocks, const std::vector<int64_t>& heads,
                                         const torch::Tensor& mask, double scale, const AttentionExtras& extras) {
  TORCH_CHECK(chunked_attention_usable(q_u, extras),
              "chunked_relative_attention: float32 CPU tensors and a BLAS needed");
  torch::Tensor qu = q_u.contiguous(), qv = q_v.contiguous(), kvc = rows_are_strided(kv) ? kv : kv.contiguous();
  torch::Tensor m = mask.to(torch::kBool).contiguous();
  const AttentionExtras ex = contiguous(extras);
  const PackedExtras packed = pack(ex);
  std::vector<torch::Tensor> tc;
  bool grad = qu.requires_grad() || qv.requires_grad() || kvc.requires_grad();
  for (const auto& t : tables) {
    tc.push_back(t.contiguous());
    grad = grad || t.requires_grad();
  }
  for (const auto& t : packed.tensors) grad = grad || t.requires_grad();
  if (grad && torch::GradMode::is_enabled())
    return ChunkedRelativeAttention::apply(qu, qv, kvc, torch::TensorList(tc), torch::TensorList(packed.tensors),
                                           pack_key_blocks(blocks), heads, m, scale, packed.spec, packed.coefs);
  RECORD_FUNCTION("xl::chunked_attention", std::vector<c10::IValue>());
  const Geometry g = geometry(qu, kvc, tc, blocks, heads, m, ex);
  torch::Tensor out = torch::empty_like(qu);
  forward_blocks(g, operands(qu, qv, kvc, tc, m, scale, ex, takes_bf16_operands(g.t)),
                 out.data_ptr<float>(), nullptr, nullptr);
  return out;
}

}  // namespace xl::kernels
