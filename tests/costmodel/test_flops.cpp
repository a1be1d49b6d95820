#include <catch2/catch.hpp>

#include "partune/costmodel/flops.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;

TEST_CASE("op-by-op FLOPs sum to the Megatron closed forms", "[flops]") {
  const ModelSpec m = load_model("gpt3-175b");
  const double B = 1536;
  CHECK(model_flops_per_step(m, B) ==
        Approx(megatron_model_flops(B, m.seq_len, m.layers, m.hidden, m.vocab)).epsilon(1e-12));
  CHECK(hardware_flops_per_step(m, B, Checkpointing::full) ==
        Approx(megatron_hardware_flops(B, m.seq_len, m.layers, m.hidden, m.vocab)).epsilon(1e-12));
}
