#pragma once
// The one table of names of each enum of the job schema: to_string, the scenario loader
// and the scenario writer all read it, so a name is spelt once. The order of a table is
// the order the loader lists the choices in when a value is not one of them.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "partune/costmodel/hardware.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/model.hpp"

namespace partune {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// Every value of E with its name, in declaration order. Specialised for Precision,
// AttentionKind, MlpKind, NormKind, PositionKind, Optimizer, PipelineSchedule, Checkpointing, CollectiveAlgorithm and
// LmHeadStage, ShardingFlavor, BackwardPrefetch, LossPrecision and ContextComm (enum_names.cpp).
template <typename E>
const std::vector<EnumName<E>>& enum_names();

template <>
const std::vector<EnumName<Precision>>& enum_names<Precision>();
template <>
const std::vector<EnumName<AttentionKind>>& enum_names<AttentionKind>();
template <>
const std::vector<EnumName<MlpKind>>& enum_names<MlpKind>();
template <>
const std::vector<EnumName<NormKind>>& enum_names<NormKind>();
template <>
const std::vector<EnumName<PositionKind>>& enum_names<PositionKind>();
template <>
const std::vector<EnumName<Optimizer>>& enum_names<Optimizer>();
template <>
const std::vector<EnumName<PipelineSchedule>>& enum_names<PipelineSchedule>();
template <>
const std::vector<EnumName<Checkpointing>>& enum_names<Checkpointing>();
template <>
const std::vector<EnumName<RecomputeModule>>& enum_names<RecomputeModule>();
template <>
const std::vector<EnumName<CollectiveAlgorithm>>& enum_names<CollectiveAlgorithm>();
template <>
const std::vector<EnumName<NcclArch>>& enum_names<NcclArch>();
template <>
const std::vector<EnumName<NcclProtocol>>& enum_names<NcclProtocol>();
template <>
const std::vector<EnumName<LmHeadStage>>& enum_names<LmHeadStage>();
template <>
const std::vector<EnumName<ShardingFlavor>>& enum_names<ShardingFlavor>();
template <>
const std::vector<EnumName<BackwardPrefetch>>& enum_names<BackwardPrefetch>();
template <>
const std::vector<EnumName<LossPrecision>>& enum_names<LossPrecision>();
template <>
const std::vector<EnumName<KernelFusion>>& enum_names<KernelFusion>();
template <>
const std::vector<EnumName<OptimizerImpl>>& enum_names<OptimizerImpl>();
template <>
const std::vector<EnumName<ContextComm>>& enum_names<ContextComm>();
template <>
const std::vector<EnumName<MoeDispatcher>>& enum_names<MoeDispatcher>();
template <>
const std::vector<EnumName<AttentionKernel>>& enum_names<AttentionKernel>();
template <>
const std::vector<EnumName<Fp8Recipe>>& enum_names<Fp8Recipe>();

// The name of a value ("?" for a value outside the table, e.g. a cast integer).
template <typename E>
const char* enum_name(E value) {
  for (const auto& n : enum_names<E>())
    if (n.value == value) return n.name;
  return "?";
}

// The value of a name; nullopt when it names none.
template <typename E>
std::optional<E> enum_value(std::string_view name) {
  for (const auto& n : enum_names<E>())
    if (name == n.name) return n.value;
  return std::nullopt;
}

// "a, b, c": the names in table order, for an error message.
template <typename E>
std::string enum_name_list() {
  std::string out;
  for (const auto& n : enum_names<E>()) out += (out.empty() ? "" : ", ") + std::string(n.name);
  return out;
}

}  // namespace partune
