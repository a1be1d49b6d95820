#pragma once
// The per-rank program (program.hpp) as text: one line per instruction, in program
// order, for people and for golden files (tests/golden/*.program.txt). Deterministic:
// the same program gives the same bytes on every machine. It shows the program's shape,
// not the cost model's numbers: an instruction's `seconds` are left out, so a change of
// an op's predicted time leaves the text alone while a change of order, peer, group,
// bytes, micro-batch, chunk or layer shows up in it.
//
// A rank's block:
//
//   rank 2: data 0, stage 1, tensor 0 (38 instructions)
//      0 recv_activation   mb 0 chunk 0            <- rank 0  131,072 B
//      1 forward           mb 0 chunk 0 layers 0-1
//      2 send_activation   mb 0 chunk 0            -> rank 4  131,072 B  async
//      3 all_reduce        mb 0 chunk 0            tensor 13 x 262,144 B
//      4 all_reduce        chunk 0 layer 1         data 6,304,768 B  async
//      5 wait              mb 0 chunk 0            #2 send_activation
//
// Columns: the instruction's index (what a `wait` names), its kind (to_string(OpKind)),
// where it is in the step (micro-batch, chunk, and the chunk's layers it covers: `layer
// L`, `layers A-B`; nothing when the instruction is not tied to one), then what it moves:
// a peer (`->` send, `<-` receive) and bytes, a group and `count x bytes` (the bytes as
// collective.hpp defines them, `count` folded calls), or a copy's bytes; `async` when it
// does not block. Bytes are exact, with thousands separators (one decimal where a folded
// call's mean is fractional).
#include <string>
#include <vector>

#include "partune/costmodel/program.hpp"

namespace partune {

// One instruction's line, without its index.
std::string instruction_text(const Instruction& in);
// One rank's block: its header line and one line per instruction.
std::string program_text(const RankProgram& program);
// Every rank's block in the order given, a blank line between two.
std::string programs_text(const std::vector<RankProgram>& programs);

}  // namespace partune
