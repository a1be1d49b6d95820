// Megatron-Core's pipeline layout string (pipeline_layout.hpp).
#include "partune/costmodel/pipeline_layout.hpp"

#include <cctype>
#include <stdexcept>

namespace partune {

namespace {

constexpr std::size_t kMaxExpanded = 1 << 20;  // symbols after expansion: a sane bound

class Expander {
 public:
  explicit Expander(const std::string& text) : s_(text) {}

  std::string all() {
    std::string out = sequence();
    if (pos_ != s_.size()) fail("unexpected '" + std::string(1, s_[pos_]) + "'");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw std::invalid_argument(why + " at character " + std::to_string(pos_ + 1) + " of \"" + s_ + "\"");
  }
  // Items up to the end or a ')'.
  std::string sequence() {
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != ')') {
      std::string item;
      const char c = s_[pos_];
      if (c == '(') {
        ++pos_;
        item = sequence();
        if (pos_ >= s_.size()) fail("a '(' is not closed");
        ++pos_;  // ')'
      } else if (c == 'E' || c == 't' || c == 'm' || c == 'L' || c == '|') {
        item = std::string(1, c);
        ++pos_;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
        continue;
      } else {
        fail("'" + std::string(1, c) + "' is not a layout symbol (E, t, m, L, |, (, ), *N)");
      }
      const long times = repeat();
      if (static_cast<double>(item.size()) * times + out.size() > kMaxExpanded) fail("the layout is too long");
      for (long i = 0; i < times; ++i) out += item;
    }
    return out;
  }
  long repeat() {
    if (pos_ >= s_.size() || s_[pos_] != '*') return 1;
    ++pos_;
    long n = 0;
    const std::size_t start = pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_])) && n <= 1000000)
      n = n * 10 + (s_[pos_++] - '0');
    if (pos_ == start || n < 1 || n > 1000000) fail("'*' needs a count from 1 to 1000000");
    return n;
  }

  const std::string& s_;
  std::size_t pos_ = 0;
};

}  // namespace

PipelineLayout parse_pipeline_layout(const std::string& text) {
  const std::string flat = Expander(text).all();
  PipelineLayout out;
  std::vector<std::string> chunks(1);
  for (char c : flat) {
    if (c == '|') chunks.emplace_back();
    else chunks.back() += c;
  }
  const std::size_t last = chunks.size() - 1;
  int embeddings = 0, losses = 0;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    int layers = 0;
    for (char c : chunks[i]) {
      if (c == 't') ++layers;
      if (c == 'E' && (i != 0 || ++embeddings > 1)) throw std::invalid_argument("'E' (the embedding) belongs once in the first chunk: \"" + text + "\"");
      if (c == 'L' && (i != last || ++losses > 1)) throw std::invalid_argument("'L' (the loss) belongs once in the last chunk: \"" + text + "\"");
      if (c == 'm') {
        if (i != last) throw std::invalid_argument("'m' (a multi-token-prediction layer) belongs in the last chunk: \"" + text + "\"");
        ++out.mtp_layers;
      }
    }
    out.chunk_layers.push_back(layers);
  }
  if (embeddings != 1 || losses != 1)
    throw std::invalid_argument("a layout has the embedding ('E') in its first chunk and the loss ('L') in its last: \"" + text + "\"");
  return out;
}

}  // namespace partune
