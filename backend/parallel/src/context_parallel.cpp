// Context parallelism's group and attention core (context_parallel.hpp).
#include "partune/backend/context_parallel.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "partune/costmodel/collective.hpp"

namespace partune::backend {

namespace {

constexpr int kAllGather = static_cast<int>(CollectiveKind::all_gather);
constexpr int kReduceScatter = static_cast<int>(CollectiveKind::reduce_scatter);
constexpr int kAllToAll = static_cast<int>(CollectiveKind::all_to_all);

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int modulo(int a, int n) { return ((a % n) + n) % n; }

// One ring step: send `out` to the next rank and receive `in` from the previous one.
void ring_step(const CommBackendPtr& group, int rank, int degree, torch::Tensor out, torch::Tensor in) {
  std::vector<torch::Tensor> send{out.contiguous()}, receive{in};
  auto sent = group->send(send, modulo(rank + 1, degree), 0);
  group->recv(receive, modulo(rank - 1, degree), 0)->wait();
  sent->wait();
}

}  // namespace

ContextParallelGroup::ContextParallelGroup(CommBackendPtr group, int degree, int rank, ContextComm comm)
    : group_(std::move(group)), degree_(degree), rank_(rank), comm_(comm) {
  if (degree < 1 || rank < 0 || rank >= degree)
    throw std::invalid_argument("ContextParallelGroup: rank " + std::to_string(rank) + " of degree " +
                                std::to_string(degree));
  if (degree > 1 && (!group_ || group_->getSize() != degree || group_->getRank() != rank))
    throw std::invalid_argument("ContextParallelGroup: the process group is not rank " + std::to_string(rank) +
                                " of " + std::to_string(degree));
  if (comm == ContextComm::a2a_p2p)
    throw std::invalid_argument("parallel.cp_comm_type: a2a+p2p is not run by the LibTorch backend");
}

torch::Tensor ContextParallelGroup::positions(std::int64_t seq_len) const { return rank_positions(seq_len, rank_); }

torch::Tensor ContextParallelGroup::all_positions(std::int64_t seq_len) const {
  std::vector<torch::Tensor> all;
  for (int r = 0; r < degree_; ++r) all.push_back(rank_positions(seq_len, r));
  return torch::cat(all);
}

torch::Tensor ContextParallelGroup::rank_positions(std::int64_t seq_len, int r) const {
  if (seq_len % (2 * degree_) != 0)
    throw std::invalid_argument("context parallelism: the sequence of " + std::to_string(seq_len) +
                                " tokens does not split into 2 x " + std::to_string(degree_) + " chunks");
  const std::int64_t chunk = seq_len / (2 * degree_);
  return torch::cat({torch::arange(r * chunk, (r + 1) * chunk, torch::kLong),
                     torch::arange((2 * degree_ - 1 - r) * chunk, (2 * degree_ - r) * chunk, torch::kLong)});
}

void ContextParallelGroup::count(int kind, double seconds) {
  tally_.calls[kind] += 1;
  tally_.seconds[kind] += seconds;
}

torch::Tensor ContextParallelGroup::gather(const torch::Tensor& t, int dim) {
  if (degree_ == 1) return t;
  const auto start = std::chrono::steady_clock::now();
  std::vector<torch::Tensor> blocks(degree_);
  blocks[rank_] = t.contiguous();
  if (comm_ == ContextComm::allgather) {
    std::vector<torch::Tensor> input{blocks[rank_]};
    std::vector<std::vector<torch::Tensor>> outputs(1);
    for (int r = 0; r < degree_; ++r) outputs[0].push_back(torch::empty_like(input[0]));
    group_->allgather(outputs, input)->wait();
    blocks = outputs[0];
  } else {
    // The ring: at step k each rank passes on the block it received at step k - 1.
    for (int k = 0; k < degree_ - 1; ++k) {
      const int out = modulo(rank_ - k, degree_), in = modulo(rank_ - k - 1, degree_);
      blocks[in] = torch::empty_like(blocks[rank_]);
      ring_step(group_, rank_, degree_, blocks[out], blocks[in]);
    }
  }
  torch::Tensor whole = torch::cat(blocks, dim);
  count(kAllGather, since(start));
  return whole;
}

torch::Tensor ContextParallelGroup::reduce_scatter(const torch::Tensor& t, int dim) {
  if (degree_ == 1) return t;
  const auto start = std::chrono::steady_clock::now();
  const std::int64_t n = t.size(dim) / degree_;
  torch::Tensor mine;
  if (comm_ == ContextComm::allgather) {
    torch::Tensor sum = t.clone(at::MemoryFormat::Contiguous);
    std::vector<torch::Tensor> tensors{sum};
    group_->allreduce(tensors)->wait();
    mine = sum.narrow(dim, rank_ * n, n).contiguous();
  } else {
    // The ring of partial sums: at step k each rank sends its partial of block
    // rank - k - 1 and adds the previous rank's partial of block rank - k - 2; after
    // degree - 1 steps it holds the whole sum of its own block.
    std::vector<torch::Tensor> partial(degree_);
    for (int j = 0; j < degree_; ++j) partial[j] = t.narrow(dim, j * n, n).contiguous();
    for (int k = 0; k < degree_ - 1; ++k) {
      const int out = modulo(rank_ - k - 1, degree_), in = modulo(rank_ - k - 2, degree_);
      torch::Tensor received = torch::empty_like(partial[in]);
      ring_step(group_, rank_, degree_, partial[out], received);
      partial[in] = partial[in] + received;
    }
    mine = partial[rank_];
  }
  count(kReduceScatter, since(start));
  return mine;
}

torch::Tensor ContextParallelGroup::exchange(const torch::Tensor& t) {
  if (degree_ == 1) return t;
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor out = all_to_all_equal_blocks(group_, t);
  count(kAllToAll, since(start));
  return out;
}

TensorCalls ContextParallelGroup::take_tally() { return tally_.take(); }

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// softmax(Q K^T / sqrt(d)) under the causal mask of the positions: q [b, H, sq, d] at
// q_pos [sq], k [b, H, sk, d] at k_pos [sk].
torch::Tensor probabilities(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& q_pos,
                            const torch::Tensor& k_pos) {
  const torch::Tensor later = k_pos.unsqueeze(0) > q_pos.unsqueeze(1);  // [sq, sk]: masked
  const torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  return torch::softmax(scores.masked_fill(later, -std::numeric_limits<float>::infinity()), -1);
}

// Key/value heads repeated for the query heads they serve; their gradients summed back.
torch::Tensor repeat_heads(const torch::Tensor& kv, std::int64_t heads) {
  return kv.size(1) == heads ? kv : kv.repeat_interleave(heads / kv.size(1), 1);
}
torch::Tensor sum_heads(const torch::Tensor& grad, std::int64_t kv_heads) {
  if (grad.size(1) == kv_heads) return grad;
  const auto s = grad.sizes();
  return grad.view({s[0], kv_heads, s[1] / kv_heads, s[2], s[3]}).sum(2);
}

// p2p / allgather: the rank's queries against every rank's keys and values, keeping its
// own keys and values only (gathered again in backward).
struct GatheredCore : public torch::autograd::Function<GatheredCore> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, std::int64_t seq_len, std::int64_t group) {
    auto* cp = reinterpret_cast<ContextParallelGroup*>(group);
    ctx->save_for_backward({q, k, v});
    ctx->saved_data["group"] = group;
    ctx->saved_data["seq_len"] = seq_len;
    const std::int64_t kv = k.size(1);
    const torch::Tensor both = cp->gather(torch::cat({k, v}, 1), 2);  // [b, 2 kv, s, d]
    const torch::Tensor p = probabilities(q, repeat_heads(both.narrow(1, 0, kv), q.size(1)), cp->positions(seq_len),
                                          cp->all_positions(seq_len));
    return torch::matmul(p, repeat_heads(both.narrow(1, kv, kv), q.size(1)));
  }
  // As the checkpointed core's (transformer_layer.cpp): dV = P^T dO, dP = dO V^T,
  // dS = P (dP - rowsum(dP P)) / sqrt(d), dQ = dS K, dK = dS^T Q; the whole sequence's
  // dK and dV reduce-scattered back to their ranks.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &dout = grad_outputs[0];
    auto* cp = reinterpret_cast<ContextParallelGroup*>(ctx->saved_data["group"].toInt());
    const std::int64_t seq_len = ctx->saved_data["seq_len"].toInt(), kv = k.size(1), heads = q.size(1);
    const torch::Tensor both = cp->gather(torch::cat({k, v}, 1), 2);
    const torch::Tensor keys = repeat_heads(both.narrow(1, 0, kv), heads);
    const torch::Tensor values = repeat_heads(both.narrow(1, kv, kv), heads);
    const torch::Tensor p = probabilities(q, keys, cp->positions(seq_len), cp->all_positions(seq_len));
    const torch::Tensor dp = torch::matmul(dout, values.transpose(-2, -1));
    const torch::Tensor ds = p * (dp - (dp * p).sum(-1, true)) / std::sqrt(static_cast<double>(q.size(-1)));
    const torch::Tensor dk = sum_heads(torch::matmul(ds.transpose(-2, -1), q), kv);
    const torch::Tensor dv = sum_heads(torch::matmul(p.transpose(-2, -1), dout), kv);
    const torch::Tensor mine = cp->reduce_scatter(torch::cat({dk, dv}, 1), 2);
    return {torch::matmul(ds, keys), mine.narrow(1, 0, kv), mine.narrow(1, kv, kv), torch::Tensor(), torch::Tensor()};
  }
};

// a2a's exchange of the heads: [b, H, s / cp, d] (the rank's tokens of all H heads) ->
// [b, H / cp, s, d] (its H / cp heads over every rank's tokens, in rank order), and back.
torch::Tensor heads_to_sequence(ContextParallelGroup& cp, const torch::Tensor& t) {
  const int c = cp.degree();
  const auto s = t.sizes();
  const torch::Tensor blocks = t.view({s[0], c, s[1] / c, s[2], s[3]}).permute({1, 0, 2, 3, 4});
  const torch::Tensor got = cp.exchange(blocks);  // [c (source rank), b, H / c, s / c, d]
  return got.permute({1, 2, 0, 3, 4}).reshape({s[0], s[1] / c, c * s[2], s[3]});
}
torch::Tensor sequence_to_heads(ContextParallelGroup& cp, const torch::Tensor& t) {
  const int c = cp.degree();
  const auto s = t.sizes();
  const torch::Tensor blocks = t.view({s[0], s[1], c, s[2] / c, s[3]}).permute({2, 0, 1, 3, 4});
  const torch::Tensor got = cp.exchange(blocks);  // [c (head group), b, H / c, s / c, d]
  return got.permute({1, 0, 2, 3, 4}).reshape({s[0], c * s[1], s[2] / c, s[3]});
}

struct HeadExchange : public torch::autograd::Function<HeadExchange> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& t, std::int64_t group, bool to_sequence) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["to_sequence"] = to_sequence;
    auto& cp = *reinterpret_cast<ContextParallelGroup*>(group);
    return to_sequence ? heads_to_sequence(cp, t) : sequence_to_heads(cp, t);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto& cp = *reinterpret_cast<ContextParallelGroup*>(ctx->saved_data["group"].toInt());
    const bool to_sequence = ctx->saved_data["to_sequence"].toBool();
    const torch::Tensor& g = grad_outputs[0];
    return {to_sequence ? sequence_to_heads(cp, g) : heads_to_sequence(cp, g), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor context_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                std::int64_t seq_len, const ContextParallel& cp) {
  const auto group = reinterpret_cast<std::int64_t>(cp.get());
  if (cp->comm() != ContextComm::a2a) return GatheredCore::apply(q, k, v, seq_len, group);
  // Q, K and V in one exchange: each split into the context group's head blocks.
  const int c = cp->degree();
  const std::int64_t heads = q.size(1), kv = k.size(1);
  if (heads % c != 0 || kv % c != 0)
    throw std::invalid_argument("parallel.cp_comm_type: a2a splits a tensor rank's " + std::to_string(heads) +
                                " query and " + std::to_string(kv) + " key/value heads over " + std::to_string(c) +
                                " context ranks");
  const auto grouped = [&](const torch::Tensor& t) {
    const auto s = t.sizes();
    return t.reshape({s[0], c, s[1] / c, s[2], s[3]});
  };
  const auto qs = q.sizes();
  const torch::Tensor packed = torch::cat({grouped(q), grouped(k), grouped(v)}, 2).flatten(1, 2);
  const torch::Tensor spread = HeadExchange::apply(packed, group, true);  // [b, (H + 2 kv) / c, s, d]
  const std::int64_t hq = heads / c, hk = kv / c;
  const torch::Tensor pos = cp->all_positions(seq_len);
  const torch::Tensor qh = spread.narrow(1, 0, hq), kh = spread.narrow(1, hq, hk), vh = spread.narrow(1, hq + hk, hk);
  const torch::Tensor p = probabilities(qh, repeat_heads(kh, hq), pos, pos);
  const torch::Tensor context = torch::matmul(p, repeat_heads(vh, hq));  // [b, H / c, s, d]
  const torch::Tensor back = HeadExchange::apply(context, group, false);
  return back.reshape(qs);
}

}  // namespace partune::backend
