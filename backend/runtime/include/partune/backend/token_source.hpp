#pragma once
// Where the training tokens come from. No LibTorch here: a batch is plain integers.
//
// Synthetic (the default): a learnable, seeded stream. A random permutation P of the
// vocabulary is drawn once from the seed; each sequence starts at a random token and
// follows x[t+1] = P(x[t]). Every target is a function of the token before it, so a
// model that learns P drives the loss from ~ln(vocab) towards 0: the loss visibly falls
// within a few steps, which is what a smoke test of training needs.
//
// File (`--data FILE`): byte-level tokens, token = byte mod vocab (vocab >= 256 keeps
// bytes intact). Each sequence is a window of seq_len + 1 bytes at a seeded random offset.
//
// Either way the batch of step k is a pure function of (seed, k, sequences, seq_len):
// the same sequences whatever the micro-batch split, so runs with different splits see
// the same data.
#include <cstdint>
#include <string>
#include <vector>

namespace partune::backend {

class TokenSource {
 public:
  // Synthetic tokens.
  TokenSource(std::uint64_t seed, int vocab);
  // Byte-level tokens from a text file; throws std::runtime_error if it cannot be read.
  TokenSource(std::uint64_t seed, int vocab, const std::string& path);

  // `sequences` windows of seq_len + 1 tokens for step `step` (0-based), row-major
  // [sequences][seq_len + 1]: inputs are columns 0..seq_len-1, targets 1..seq_len.
  // Throws std::runtime_error when the file is shorter than one window.
  std::vector<std::int64_t> batch(int step, int sequences, int seq_len) const;

  std::string describe() const;

 private:
  std::uint64_t seed_;
  int vocab_;
  std::string path_;
  std::vector<std::int64_t> file_tokens_;   // file mode
  std::vector<std::int64_t> permutation_;   // synthetic mode
};

}  // namespace partune::backend
