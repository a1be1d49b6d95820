// What the backend's layer costs beyond its plan (calibrate.hpp: fit_layer_overhead).
#include <algorithm>
#include <vector>

#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/kernels/calibrate.hpp"

namespace partune::kernels {

namespace {

// The intercept at zero tokens of the least-squares line through (tokens, y): the part of
// y that does not grow with the tokens.
double intercept(const std::vector<double>& tokens, const std::vector<double>& y) {
  const double n = static_cast<double>(y.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    sx += tokens[i];
    sy += y[i];
    sxx += tokens[i] * tokens[i];
    sxy += tokens[i] * y[i];
  }
  const double d = n * sxx - sx * sx;
  if (y.size() < 2 || d == 0) return y.empty() ? 0.0 : sy / n;
  return (sy * sxx - sx * sxy) / d;
}

}  // namespace

LayerOverhead fit_layer_overhead(LayerOverhead layer, const GpuProfile& gpu) {
  GpuProfile plain = gpu;
  plain.layer_overhead_fwd = plain.layer_overhead_bwd = 0;
  ModelSpec m;  // the backend layer's shape: GPT, biases, LayerNorm, GeLU, no dropout
  m.name = "calibration-layer";
  m.layers = 1;
  m.hidden = layer.hidden;
  m.heads = m.kv_heads = layer.heads;
  m.ffn_hidden = layer.ffn_hidden;
  m.vocab = 256;
  m.dropout = 0;
  PlanConfig c;
  c.precision = Precision::fp32;
  std::vector<double> tokens, forward, backward;
  for (const LayerSample& s : layer.samples) {
    tokens.push_back(s.tokens);
    m.seq_len = s.tokens;
    const LayerTime planned = plan_time(plain, transformer_layer_plan(m, c), Precision::fp32, false);
    forward.push_back(s.forward - planned.forward());
    backward.push_back(s.backward - planned.backward());
  }
  layer.forward = std::max(0.0, intercept(tokens, forward));
  layer.backward = std::max(0.0, intercept(tokens, backward));
  return layer;
}

}  // namespace partune::kernels
