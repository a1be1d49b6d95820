#include "partune/costmodel/model.hpp"

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

int ModelSpec::moe_layers_in(int first, int count) const {
  if (!is_moe() || count <= 0) return 0;
  // Multiples of moe_every in [max(first, first_dense_layers), first + count).
  const int end = first + count;
  first = first < first_dense_layers ? first_dense_layers : first;
  if (first >= end) return 0;
  return (end + moe_every - 1) / moe_every - (first + moe_every - 1) / moe_every;
}

}  // namespace partune
