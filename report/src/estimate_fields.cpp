// The tables of an Estimate's numbers (estimate_fields.hpp).
#include "partune/report/estimate_fields.hpp"

namespace partune::report {

const std::vector<EstimateField>& estimate_fields() {
  using E = const Estimate&;
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
  static const std::vector<StepField> fields = {
      {"compute_s", &B::compute, "compute (forward + backward)", true, &B::recompute, "  incl. recompute {}"},
      {"recompute_s", &B::recompute, nullptr, false, nullptr, nullptr},
      {"tensor_parallel_comm_s", &B::tensor_parallel_comm, "tensor-parallel communication", true, nullptr, nullptr},
      {"pipeline_bubble_s", &B::pipeline_bubble, "pipeline bubble", true, nullptr, nullptr},
      {"pipeline_drain_waits_s", &B::pipeline_drain_waits, "pipeline drain (gradient buckets)", false, nullptr,
       nullptr},
      {"pipeline_p2p_s", &B::pipeline_p2p, "pipeline send/recv (exposed)", true, nullptr, nullptr},
      {"data_parallel_comm_s", &B::data_parallel_comm, nullptr, false, nullptr, nullptr},
      {"data_parallel_exposed_s", &B::data_parallel_exposed, "data-parallel gradients (exposed)", true,
       &B::data_parallel_comm, of_total},
      {"sharded_comm_s", &B::sharded_comm, nullptr, false, nullptr, nullptr},
      {"sharded_exposed_s", &B::sharded_exposed, "sharded all-gather/reduce-scatter (exposed)", true, &B::sharded_comm,
       of_total},
      {"offload_traffic_s", &B::offload_traffic, nullptr, false, nullptr, nullptr},
      {"offload_exposed_s", &B::offload_exposed, "offload copies (exposed)", true, &B::offload_traffic, of_total},
      {"optimizer_s", &B::optimizer, "optimizer step", true, nullptr, nullptr},
  };
  return fields;
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
