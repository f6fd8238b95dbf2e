// The Compressive Transformer's compression of old memories (Rae et al. 2020): a layer's inputs
// that leave its memory, `rate` at a time, become one compressed memory slot each, by
//   conv     a 1-D convolution with kernel = stride = rate: W [d, d, rate] and a bias, started as
//            mean pooling (W = I / rate)
//   dilated  a stack of L = ceil(log2 rate) kernel-2 convolutions of dilation 1, 2, 4, ... over the
//            group, left-padded with zeros to 2^L inputs, read at the group's last position (the
//            paper names dilated convolutions without their shape: this is WaveNet's, linear),
//            started as the mean of each pair
//   max      max pooling, and mean mean pooling, with kernel = stride = rate (no weights)
// The learned ones have a decoder for the auto-encoding loss: a transposed convolution with
// kernel = stride = rate back to the inputs, started as a copy of the slot to each position.
// Nothing here draws random numbers: a model's other weights are what they are without it.
#pragma once
#include <torch/torch.h>

#include <string>

namespace xl::model {

class CompressionImpl : public torch::nn::Module {
 public:
  CompressionImpl(const std::string& fn, int64_t rate, int64_t d_model);
  // [B, n * rate, d] -> [B, n, d]
  torch::Tensor forward(const torch::Tensor& old);
  // [B, n, d] -> [B, n * rate, d]: the auto-encoding loss's reconstruction (learned fns only).
  torch::Tensor decode(const torch::Tensor& compressed);
  // Whether it has weights for the training losses to train.
  bool learned() const { return fn == "conv" || fn == "dilated"; }
  // The weights at their starting values (the mean of a group, a copy back).
  void reset_parameters();

  std::string fn;
  int64_t rate, d_model, levels = 0;
  torch::Tensor weight, bias;                  // conv: [d, d, rate], [d]; dilated: [L, 2, d, d], [L, d]
  torch::Tensor decoder_weight, decoder_bias;  // [rate * d, d], [d]
};
TORCH_MODULE(Compression);

class RelMultiHeadAttnImpl;

// The attention-reconstruction loss (Rae et al.): the content attention (softmax(q k^T / sqrt(dh))
// v per head, no positions or biases, as both public ports compute it) of the layer's queries over
// the inputs that left its memory, against the same over their compression; mean squared error.
// The layer's input `w`, the inputs `old` and the attention's weights are taken without their
// gradients: only the compression network (through `compressed`) learns from it.
torch::Tensor attention_reconstruction_loss(const RelMultiHeadAttnImpl& attn, const torch::Tensor& w,
                                            const torch::Tensor& old, const torch::Tensor& compressed);
// The auto-encoding loss: the decoder's reconstruction of `old` from `compressed`, mean squared error.
torch::Tensor auto_encoding_loss(CompressionImpl& compression, const torch::Tensor& old, const torch::Tensor& compressed);

}  // namespace xl::model
