// The per-rank program as text (program_text.hpp): one line per instruction.
#include "partune/costmodel/program_text.hpp"

#include <fmt/format.h>

#include <cmath>
#include <string>

namespace partune {

namespace {

// 1234567 -> "1,234,567"; a fractional value keeps one decimal ("1,234.5").
std::string bytes_text(double bytes) {
  const double rounded = std::round(bytes * 10.0) / 10.0;
  const bool whole = std::fabs(rounded - std::round(rounded)) < 1e-9;
  const long long integral = static_cast<long long>(std::fabs(whole ? std::round(rounded) : std::trunc(rounded)));
  std::string digits = std::to_string(integral);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<std::size_t>(i), ",");
  if (rounded < 0) digits.insert(0, "-");
  if (!whole) digits += fmt::format(".{}", static_cast<int>(std::lround(std::fabs(rounded) * 10.0)) % 10);
  return digits + " B";
}

// Where the instruction is in the step: micro-batch, chunk and the chunk's layers it
// covers (a whole-chunk instruction covers the chunk's first `layers`).
std::string position_text(const Instruction& in) {
  std::string out;
  if (in.microbatch >= 0) out += fmt::format("mb {} ", in.microbatch);
  if (in.microbatch >= 0 || in.layer >= 0 || in.layers > 0) out += fmt::format("chunk {} ", in.chunk);
  const int first = in.layer >= 0 ? in.layer : 0;
  if (in.layer >= 0 && in.layers <= 1)
    out += fmt::format("layer {} ", in.layer);
  else if (in.layers == 1)
    out += fmt::format("layer {} ", first);
  else if (in.layers > 1)
    out += fmt::format("layers {}-{} ", first, first + in.layers - 1);
  if (!out.empty()) out.pop_back();
  return out;
}

bool is_send(OpKind k) { return k == OpKind::send_activation || k == OpKind::send_gradient; }
bool is_recv(OpKind k) { return k == OpKind::recv_activation || k == OpKind::recv_gradient; }
bool is_copy(OpKind k) {
  return k == OpKind::offload || k == OpKind::reload || k == OpKind::offload_gradients ||
         k == OpKind::reload_parameters;
}

// What the instruction moves: peer and bytes, group and calls, a copy's bytes.
std::string payload_text(const Instruction& in) {
  if (is_send(in.kind)) return fmt::format("-> rank {}  {}", in.peer, bytes_text(in.bytes));
  if (is_recv(in.kind)) return fmt::format("<- rank {}  {}", in.peer, bytes_text(in.bytes));
  if (is_collective(in.kind)) {
    const std::string calls = in.count == 1 ? "" : fmt::format("{} x ", in.count);
    return fmt::format("{} {}{}", to_string(in.group), calls, bytes_text(in.bytes));
  }
  if (is_copy(in.kind)) return bytes_text(in.bytes);
  if (in.kind == OpKind::wait) return fmt::format("#{}", in.wait_for);
  return "";
}

std::string line(const Instruction& in, const std::string& awaited) {
  std::string out = fmt::format("{:<17} {:<24}", to_string(in.kind), position_text(in));
  std::string payload = payload_text(in);
  if (!awaited.empty()) payload += " " + awaited;
  if (in.async) payload += "  async";
  if (in.posted_early) payload += "  early";
  out += payload;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace

std::string instruction_text(const Instruction& in) { return line(in, ""); }

std::string program_text(const RankProgram& program) {
  const RankCoords& c = program.coords;
  std::string out = fmt::format("rank {}: data {}, stage {}, tensor {} ({} instructions)\n", program.rank, c.data,
                                c.pipeline, c.tensor, program.ops.size());
  const int n = static_cast<int>(program.ops.size());
  for (int i = 0; i < n; ++i) {
    const Instruction& in = program.ops[i];
    // A wait names the kind it awaits, so the line reads without looking up the index.
    const bool known = in.kind == OpKind::wait && in.wait_for >= 0 && in.wait_for < n;
    out += fmt::format("{:>4} {}\n", i, line(in, known ? to_string(program.ops[in.wait_for].kind) : ""));
  }
  return out;
}

std::string programs_text(const std::vector<RankProgram>& programs) {
  std::string out;
  for (const RankProgram& p : programs) {
    if (!out.empty()) out += "\n";
    out += program_text(p);
  }
  return out;
}

}  // namespace partune
