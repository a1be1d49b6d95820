// The tables of a step's figures (estimate_fields.hpp).
#include "partune/report/estimate_fields.hpp"

namespace partune::report {

const std::vector<EstimateField>& estimate_fields() {
  using E = const StepMetrics&;
  static const std::vector<EstimateField> fields = {
      {"step_time_s", [](E e) { return e.step_time; }},
      {"samples_per_s", [](E e) { return e.samples_per_s; }},
      {"tokens_per_s", [](E e) { return e.tokens_per_s; }},
      {"tflops_per_gpu", [](E e) { return e.tflops_per_gpu; }},
      {"hw_tflops_per_gpu", [](E e) { return e.hw_tflops_per_gpu; }},
      {"mfu", [](E e) { return e.mfu; }},
      {"model_flops_per_step", [](E e) { return e.model_flops; }},
      {"hardware_flops_per_step", [](E e) { return e.hardware_flops; }},
      {"peak_memory_bytes", [](E e) { return e.memory.total(); }},
      {"memory_capacity_bytes", [](E e) { return e.memory_capacity; }},
      {"headroom_bytes", [](E e) { return e.memory_capacity - e.memory.total(); }},
  };
  return fields;
}

const std::vector<StepField>& step_fields() {
  using B = StepBreakdown;
  static const char* const of_total = "  of {} total";
  // The labelled rows are the parts of the step (estimator.hpp's sum), under "exposed_s";
  // the others are totals, under "totals_s".
  static const std::vector<StepField> fields = {
      {"compute", &B::compute, "compute (forward + backward)", true, &B::recompute, "  incl. recompute {}"},
      {"tensor_parallel", &B::tensor_parallel_comm, "tensor-parallel communication", true, nullptr, nullptr},
      {"context_parallel", &B::context_parallel_comm, "context-parallel K/V exchange", false, nullptr, nullptr},
      {"expert_parallel", &B::expert_parallel_comm, "expert all-to-all (tokens)", false, nullptr, nullptr},
      {"pipeline_bubble", &B::pipeline_bubble, "pipeline bubble", true, nullptr, nullptr},
      {"pipeline_drain_waits", &B::pipeline_drain_waits, "pipeline drain (gradient buckets)", false, nullptr,
       nullptr},
      {"pipeline_p2p", &B::pipeline_p2p, "pipeline send/recv (exposed)", true, nullptr, nullptr},
      {"data_parallel", &B::data_parallel_exposed, "data-parallel gradients (exposed)", true, &B::data_parallel_comm,
       of_total},
      {"sharded", &B::sharded_exposed, "sharded all-gather/reduce-scatter (exposed)", true, &B::sharded_comm,
       of_total},
      {"offload", &B::offload_exposed, "offload copies (exposed)", true, &B::offload_traffic, of_total},
      {"optimizer", &B::optimizer, "optimizer step", true, nullptr, nullptr},
      {"recompute", &B::recompute, nullptr, false, nullptr, nullptr},
      {"data_parallel", &B::data_parallel_comm, nullptr, false, nullptr, nullptr},
      {"sharded", &B::sharded_comm, nullptr, false, nullptr, nullptr},
      {"offload", &B::offload_traffic, nullptr, false, nullptr, nullptr},
  };
  return fields;
}

const char* step_sum_rule() {
  return "the exposed_s parts add up to step_time_s (within rounding): each is time the critical stage spends on "
         "that kind and nothing else; totals_s are each kind's whole busy time (recompute: of exposed_s.compute; "
         "data_parallel, sharded, offload: partly hidden under compute, only their exposed_s part adds to the step)";
}

const std::vector<MemoryField>& memory_fields() {
  using M = const MemoryBreakdown&;
  static const std::vector<MemoryField> fields = {
      {"parameters_bytes", [](M m) { return m.parameters; }, "parameters", MemoryRow::part},
      {"gradients_bytes", [](M m) { return m.gradients; }, "gradients", MemoryRow::part},
      {"optimizer_states_bytes", [](M m) { return m.optimizer_states; }, "optimizer states", MemoryRow::part},
      {"gathered_parameters_bytes", [](M m) { return m.gathered_parameters; }, "gathered parameters (sharded DP)",
       MemoryRow::part},
      {"activations_bytes", [](M m) { return m.activations; }, "stored activations", MemoryRow::part},
      {"activation_working_bytes", [](M m) { return m.activation_working; }, "activation working set",
       MemoryRow::part},
      {"logits_bytes", [](M m) { return m.logits; }, "logits and loss", MemoryRow::part},
      // The head's logits and the recompute working set share the peak (MemoryBreakdown::transient).
      {nullptr, [](M m) { return m.logits + m.activation_working - m.transient(); },
       "  not live together (logits, working)", MemoryRow::overlap},
      {"communication_buffers_bytes", [](M m) { return m.communication_buffers; }, "communication buffers",
       MemoryRow::part},
      {"reserved_bytes", [](M m) { return m.reserved; }, "reserved (context, allocator)", MemoryRow::part},
      {"total_bytes", [](M m) { return m.total(); }, "total", MemoryRow::total},
      {"host_offload_bytes", [](M m) { return m.host_offload; }, "offloaded to host (per GPU)", MemoryRow::host},
  };
  return fields;
}

}  // namespace partune::report
