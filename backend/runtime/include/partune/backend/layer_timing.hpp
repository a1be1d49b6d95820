#pragma once
// The backend's own transformer layer timed alone on this host (partune calibrate): one
// sequence of a few tokens forward, then backward of its output, so that what the layer
// costs beyond its arithmetic (operator dispatch, autograd bookkeeping, allocations) can be
// told from what the layer plan prices (kernels/calibrate.hpp: fit_layer_overhead).
#include "partune/kernels/calibrate.hpp"

namespace partune::backend {

// `layer`'s shape as a backend layer on one LibTorch thread, at 8, 16 and 32 tokens: 50
// forward-then-backward runs after 50 warm-up runs each, the medians into layer.samples.
kernels::LayerOverhead time_layer(kernels::LayerOverhead layer);

}  // namespace partune::backend
