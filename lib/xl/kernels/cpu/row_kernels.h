// Vectorized loops over one row: of attention scores, shared by the full-matrix softmax
// (rel_softmax) and the blocked attention core (chunked_attention); of the loss's logits
// (target_log_softmax); of a layer norm (dropout_add_layer_norm); of the feed-forward's inner
// activations (decoder_layer). float rows use AVX2 when the
// CPU has it; double rows (the tests' precision) run plain loops.
#pragma once
#include <cstdint>

namespace xl::kernels::rows {

float dot(const float* a, const float* b, int64_t n);
double dot(const double* a, const double* b, int64_t n);

// A single query q [n] against `count` rows of x, ld floats apart: s[j] = dot(q, x[j * ld, + n)).
// One query's scores read each key once, where a product's call and packing cost more than the row.
void dots(const float* q, const float* x, int64_t ld, int64_t count, float* s, int64_t n);
// s[j] = dot(v, v) for v = x[j * ld, + n): the squared lengths of `count` vectors in one call
// (MGK's row and column terms, 32 floats a head in the tiny model, where a call per vector cost
// more than its arithmetic).
void squared_lengths(const float* x, int64_t ld, int64_t count, float* s, int64_t n);
// y [n] = sum_j p[j] x[j * ld, + n): one query's probabilities times the values' rows.
void weighted_rows(const float* p, const float* x, int64_t ld, int64_t count, float* y, int64_t n);

// s[j] = (a[j] + b[j]) * scale
void add_scale(const float* a, const float* b, float* s, int64_t n, float scale);
void add_scale(const double* a, const double* b, double* s, int64_t n, double scale);

// x[j] = max(x[j] + b[j], 0): a bias and the ReLU in one pass.
void bias_relu(float* x, const float* b, int64_t n);

// gs[j] = p[j] * (g[j] - d) * scale: softmax's backward with d = dot(p, g), then the scale.
// gs may be g.
void softmax_grad(const float* p, const float* g, float* gs, int64_t n, float d, float scale);
void softmax_grad(const double* p, const double* g, double* gs, int64_t n, double d, double scale);

// s[j] = hidden[j] ? -inf : (a[j] + b[j]) * scale; returns the largest s[j].
float masked_scores(const float* a, const float* b, const bool* hidden, float* s, int64_t n, float scale);

// One row's mixture logits over a run of keys, with the positional scores bd and the mask in the
// same pass (the blocked attention): from its M components' products x[m] (M <= 16) and their
// affine terms, y_m[j] = coef[m] x[m][j] + row[m] + col[m][j] and best[j] = max_m y_m[j], the
// logit is u[j] + log w[j] with u[j] = best[j] + scale bd[j] (-inf where hidden) and w[j] =
// sum_m exp(y_m[j] - best[j]) (hard E-step: w = 1, the logit max_m y_m + scale bd); the first
// M - 1 responsibilities exp(y_m - best) / w (hard: 1 for the first component at the maximum,
// else 0) into resp[m] unless resp is null. Returns max_j u[j]; w may be x[0]. Leaving log w to
// weighted_softmax saves a logarithm and a pass a score, which shrank the row kernels' share of
// MGK's evaluation (measured: bench/HISTORY.md, "The mixture's logarithm left to the softmax").
float mixture_logits(const float* const* x, const float* coef, const float* row, const float* const* col,
                     int64_t m_count, const float* bd, const bool* hidden, float* u, float* w, float* const* resp,
                     int64_t n, bool hard, float scale);
// Its backward for component m of a row, from the content's gradient g: with the component's
// responsibilities r (resp + m * plane; the last component's 1 - the others'), d[j] = g_scale g[j]
// r[j] is its logits' gradient: added to d_col, dx[j] = coef d[j] (the product's), and the sum of
// d returned (the row term's).
float mixture_grad(const float* g, const float* resp, int64_t plane, int64_t m, int64_t m_count, float g_scale,
                   float coef, float* dx, float* d_col, int64_t n);

// Softmax of a row of scores in place (hidden entries -inf become exactly 0), given its maximum.
void softmax(float* x, int64_t n, float max);

// Softmax of the logits x[j] + log w[j] in place (w > 0; -inf entries become exactly 0), given
// max_j x[j]: x[j] = w[j] exp(x[j] - max) / sum.
void weighted_softmax(float* x, const float* w, int64_t n, float max);

// log sum_j exp(x[j]), the row read twice (its maximum, then the sum) and never written.
float log_sum_exp(const float* x, int64_t n);
double log_sum_exp(const double* x, int64_t n);

// y[j] = scale * exp(x[j] - shift): with shift = log_sum_exp(x), the softmax times a scale.
void exp_shifted(const float* x, float* y, int64_t n, float shift, float scale);
void exp_shifted(const double* x, double* y, int64_t n, double shift, double scale);

// y = (s - mean) * rstd * w + b over a row of n, with its mean and rstd = 1/sqrt(variance + eps)
// (the centred squares after the mean: no cancellation when the mean is large against the spread).
void layer_norm(const float* s, const float* w, const float* b, float* y, int64_t n, double eps, float* mean,
                float* rstd);
void layer_norm(const double* s, const double* w, const double* b, double* y, int64_t n, double eps, double* mean,
                double* rstd);

// Its backward for one row: ds = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy w and
// xhat = (s - mean) rstd; dw += dy xhat and db += dy (accumulated).
void layer_norm_grad(const float* dy, const float* w, const float* s, float mean, float rstd, float* ds, float* dw,
                     float* db, int64_t n);
void layer_norm_grad(const double* dy, const double* w, const double* s, double mean, double rstd, double* ds,
                     double* dw, double* db, int64_t n);

}  // namespace xl::kernels::rows
