#include "partune/costmodel/model.hpp"

#include "partune/costmodel/enum_names.hpp"

namespace partune {

const char* to_string(AttentionKind k) { return enum_name(k); }  // enum_names.cpp

int ModelSpec::moe_layers_in(int first, int count) const {
  if (!is_moe() || count <= 0) return 0;
  // Multiples of moe_every in [max(first, first_dense_layers), first + count).
  const int end = first + count;
  first = first < first_dense_layers ? first_dense_layers : first;
  if (first >= end) return 0;
  return (end + moe_every - 1) / moe_every - (first + moe_every - 1) / moe_every;
}

}  // namespace partune
