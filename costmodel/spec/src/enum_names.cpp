#include "partune/costmodel/enum_names.hpp"

namespace partune {

template <>
const std::vector<EnumName<Precision>>& enum_names<Precision>() {
  static const std::vector<EnumName<Precision>> table = {
      {Precision::fp32, "fp32"}, {Precision::tf32, "tf32"}, {Precision::fp16, "fp16"}, {Precision::bf16, "bf16"},
      {Precision::fp8, "fp8"}, {Precision::mxfp8, "mxfp8"}, {Precision::fp4, "fp4"}};
  return table;
}

template <>
const std::vector<EnumName<AttentionKind>>& enum_names<AttentionKind>() {
  static const std::vector<EnumName<AttentionKind>> table = {
      {AttentionKind::mha, "mha"}, {AttentionKind::gqa, "gqa"}, {AttentionKind::mqa, "mqa"}, {AttentionKind::mla, "mla"}};
  return table;
}

template <>
const std::vector<EnumName<MlpKind>>& enum_names<MlpKind>() {
  static const std::vector<EnumName<MlpKind>> table = {{MlpKind::gelu, "gelu"}, {MlpKind::swiglu, "swiglu"}};
  return table;
}

template <>
const std::vector<EnumName<NormKind>>& enum_names<NormKind>() {
  static const std::vector<EnumName<NormKind>> table = {{NormKind::layernorm, "layernorm"},
                                                        {NormKind::rmsnorm, "rmsnorm"}};
  return table;
}

template <>
const std::vector<EnumName<PositionKind>>& enum_names<PositionKind>() {
  static const std::vector<EnumName<PositionKind>> table = {{PositionKind::learned, "learned"},
                                                            {PositionKind::rope, "rope"}};
  return table;
}

template <>
const std::vector<EnumName<Optimizer>>& enum_names<Optimizer>() {
  static const std::vector<EnumName<Optimizer>> table = {{Optimizer::adam, "adam"}, {Optimizer::sgd, "sgd"}};
  return table;
}

// simple = GPipe, interleaved = 1F1B (SageMaker model parallel's names); zb-h1 the
// zero-bubble schedule's name in its paper.
template <>
const std::vector<EnumName<PipelineSchedule>>& enum_names<PipelineSchedule>() {
  static const std::vector<EnumName<PipelineSchedule>> table = {{PipelineSchedule::gpipe, "simple"},
                                                                {PipelineSchedule::one_f_one_b, "interleaved"},
                                                                {PipelineSchedule::zb_h1, "zb-h1"},
                                                                {PipelineSchedule::zbv, "zbv"},
                                                                {PipelineSchedule::dualpipev, "dualpipev"}};
  return table;
}

template <>
const std::vector<EnumName<Checkpointing>>& enum_names<Checkpointing>() {
  static const std::vector<EnumName<Checkpointing>> table = {
      {Checkpointing::none, "none"}, {Checkpointing::selective, "selective"}, {Checkpointing::full, "full"},
      {Checkpointing::op, "op"}, {Checkpointing::dots, "dots"}};
  return table;
}

template <>
const std::vector<EnumName<RecomputeModule>>& enum_names<RecomputeModule>() {
  static const std::vector<EnumName<RecomputeModule>> table = {
      {RecomputeModule::core_attn, "core_attn"}, {RecomputeModule::mla_up_proj, "mla_up_proj"},
      {RecomputeModule::layernorm, "layernorm"}, {RecomputeModule::mlp, "mlp"}, {RecomputeModule::moe, "moe"},
      {RecomputeModule::moe_act, "moe_act"},     {RecomputeModule::shared_experts, "shared_experts"}};
  return table;
}

template <>
const std::vector<EnumName<CollectiveAlgorithm>>& enum_names<CollectiveAlgorithm>() {
  static const std::vector<EnumName<CollectiveAlgorithm>> table = {{CollectiveAlgorithm::ring, "ring"},
                                                                   {CollectiveAlgorithm::tree, "tree"},
                                                                   {CollectiveAlgorithm::hierarchical, "hierarchical"},
                                                                   {CollectiveAlgorithm::all_to_all, "all_to_all"},
                                                                   {CollectiveAlgorithm::nccl, "nccl"},
                                                                   {CollectiveAlgorithm::nvls, "nvls"}};
  return table;
}

template <>
const std::vector<EnumName<NcclArch>>& enum_names<NcclArch>() {
  static const std::vector<EnumName<NcclArch>> table = {{NcclArch::none, "none"},
                                                        {NcclArch::ampere, "ampere"},
                                                        {NcclArch::hopper, "hopper"},
                                                        {NcclArch::blackwell, "blackwell"}};
  return table;
}

template <>
const std::vector<EnumName<NcclProtocol>>& enum_names<NcclProtocol>() {
  static const std::vector<EnumName<NcclProtocol>> table = {{NcclProtocol::automatic, "auto"},
                                                            {NcclProtocol::ll, "ll"},
                                                            {NcclProtocol::ll128, "ll128"},
                                                            {NcclProtocol::simple, "simple"}};
  return table;
}

template <>
const std::vector<EnumName<LmHeadStage>>& enum_names<LmHeadStage>() {
  static const std::vector<EnumName<LmHeadStage>> table = {{LmHeadStage::last, "last"}, {LmHeadStage::first, "first"}};
  return table;
}

template <>
const std::vector<EnumName<ShardingFlavor>>& enum_names<ShardingFlavor>() {
  static const std::vector<EnumName<ShardingFlavor>> table = {
      {ShardingFlavor::smp, "smp"}, {ShardingFlavor::zero3, "zero3"}, {ShardingFlavor::fsdp, "fsdp"}, {ShardingFlavor::fsdp2, "fsdp2"}};
  return table;
}

template <>
const std::vector<EnumName<BackwardPrefetch>>& enum_names<BackwardPrefetch>() {
  static const std::vector<EnumName<BackwardPrefetch>> table = {
      {BackwardPrefetch::pre, "pre"}, {BackwardPrefetch::post, "post"}, {BackwardPrefetch::none, "none"}};
  return table;
}

template <>
const std::vector<EnumName<LossPrecision>>& enum_names<LossPrecision>() {
  static const std::vector<EnumName<LossPrecision>> table = {{LossPrecision::fp32, "fp32"},
                                                             {LossPrecision::training, "training"}};
  return table;
}

template <>
const std::vector<EnumName<AttentionKernel>>& enum_names<AttentionKernel>() {
  static const std::vector<EnumName<AttentionKernel>> table = {{AttentionKernel::flash1, "flash1"},
                                                               {AttentionKernel::flash2, "flash2"},
                                                               {AttentionKernel::flash3, "flash3"},
                                                               {AttentionKernel::cudnn, "cudnn"},
                                                               {AttentionKernel::partune, "partune"}};
  return table;
}

template <>
const std::vector<EnumName<Fp8Recipe>>& enum_names<Fp8Recipe>() {
  static const std::vector<EnumName<Fp8Recipe>> table = {{Fp8Recipe::delayed, "delayed"},
                                                         {Fp8Recipe::current, "current"}};
  return table;
}

template <>
const std::vector<EnumName<KernelFusion>>& enum_names<KernelFusion>() {
  static const std::vector<EnumName<KernelFusion>> table = {
      {KernelFusion::fused, "fused"}, {KernelFusion::eager, "eager"}, {KernelFusion::compiled, "compiled"}};
  return table;
}

template <>
const std::vector<EnumName<OptimizerImpl>>& enum_names<OptimizerImpl>() {
  static const std::vector<EnumName<OptimizerImpl>> table = {{OptimizerImpl::fused, "fused"},
                                                             {OptimizerImpl::torch, "torch"},
                                                             {OptimizerImpl::foreach, "foreach"},
                                                             {OptimizerImpl::per_tensor, "per_tensor"}};
  return table;
}

template <>
const std::vector<EnumName<MoeDispatcher>>& enum_names<MoeDispatcher>() {
  static const std::vector<EnumName<MoeDispatcher>> table = {{MoeDispatcher::alltoall, "alltoall"},
                                                             {MoeDispatcher::allgather, "allgather"},
                                                             {MoeDispatcher::deepep, "deepep"}};
  return table;
}

template <>
const std::vector<EnumName<ContextComm>>& enum_names<ContextComm>() {
  static const std::vector<EnumName<ContextComm>> table = {{ContextComm::p2p, "p2p"},
                                                           {ContextComm::a2a, "a2a"},
                                                           {ContextComm::allgather, "allgather"},
                                                           {ContextComm::a2a_p2p, "a2a+p2p"}};
  return table;
}

}  // namespace partune
