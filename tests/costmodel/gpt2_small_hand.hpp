#pragma once
// GPT-2 small's figures worked out by hand (h 768, f 3072, s 1024, a 12, vocab 50257), the
// independent expectations the stage tests (uneven stages and chunks, the head on stage 0)
// compare the cost model against:
//   layer parameters   12 h^2 + 13 h      = 7,087,872
//   embedding          vocab h + s h      = 39,383,808
//   head (tied)        final norm 2 h     = 1,536
//   tied copy on the last stage (pp > 1)  = vocab h = 38,597,376
//   activations per layer, b 1, t 1, no checkpointing (Korthikanti):
//     s b h (34 + 5 a s / h) = 1024 x 768 x (34 + 80) = 89,653,248 bytes
//   logits of one micro-batch, b 1, t 1: 6 b s V = 308,779,008 bytes
namespace partune::testing::gpt2_small {

constexpr double kLayerParams = 7087872.0;
constexpr double kEmbeddingParams = 39383808.0;
constexpr double kHeadParams = 1536.0;
constexpr double kTiedCopy = 38597376.0;
constexpr double kLayerActivations = 89653248.0;  // b 1, t 1, no checkpointing
constexpr double kLogits = 308779008.0;           // b 1, t 1

}  // namespace partune::testing::gpt2_small
