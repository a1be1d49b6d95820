#include "partune/costmodel/model.hpp"

#include <algorithm>
#include <cmath>

#include "partune/costmodel/enum_names.hpp"

namespace partune {

const char* to_string(AttentionKind k) { return enum_name(k); }  // enum_names.cpp

double ModelSpec::attention_span_fraction() const {
  if (sliding_window <= 0 || layers <= 0) return 1.0;
  const double s = seq_len, w = sliding_window < seq_len ? sliding_window : seq_len;
  const double windowed = (w * (w + 1.0) + 2.0 * (s - w) * w) / (s * s);
  int full = 0;
  for (int l = 0; l < layers; ++l) full += is_full_attention_layer(l) ? 1 : 0;
  const double mean = (full + (layers - full) * (windowed < 1.0 ? windowed : 1.0)) / layers;
  return mean;
}

double ModelSpec::busiest_expert_rank_load(int expert_degree) const {
  if (experts <= 0 || expert_load_skew <= 0) return 1.0;
  const int ep = expert_degree < 1 ? 1 : expert_degree, local = experts / ep;
  double norm = 0;
  for (int i = 0; i < experts; ++i) norm += std::pow(i + 1.0, -expert_load_skew);
  double busiest = 0;
  for (int r = 0; r < ep; ++r) {
    double rows = 0;  // in units of an expert's even share
    for (int i = r * local; i < (r + 1) * local; ++i)
      rows += std::max(capacity_factor, experts * std::pow(i + 1.0, -expert_load_skew) / norm);
    busiest = std::max(busiest, rows);
  }
  return busiest * ep / (experts * capacity_factor);
}

int ModelSpec::moe_layers_in(int first, int count) const {
  if (!is_moe() || count <= 0) return 0;
  // Multiples of moe_every in [max(first, first_dense_layers), first + count).
  const int end = first + count;
  first = first < first_dense_layers ? first_dense_layers : first;
  if (first >= end) return 0;
  return (end + moe_every - 1) / moe_every - (first + moe_every - 1) / moe_every;
}

}  // namespace partune
