#include "copy_completion.hpp"

#include <utility>

namespace partune::sim {

CopyCompletion::CopyCompletion(s4u::Host* host, std::string name, std::function<void(int index)> report)
    : host_(host), name_(std::move(name)), report_(std::move(report)) {}

void CopyCompletion::watch(s4u::CommPtr copy, int index) {
  if (idle_.empty()) {
    watchers_.push_back(std::make_unique<Watcher>());
    Watcher* w = watchers_.back().get();
    s4u::Actor::create(name_, host_, [this, w] { run(*w); });
    idle_.push_back(w);
  }
  Watcher* w = idle_.back();
  idle_.pop_back();
  w->copy = std::move(copy);
  w->index = index;
  w->wake->release();
}

void CopyCompletion::run(Watcher& w) {
  for (;;) {
    w.wake->acquire();
    if (w.stop) return;
    w.copy->wait();
    w.copy = nullptr;
    report_(w.index);
    idle_.push_back(&w);
  }
}

void CopyCompletion::stop() {
  for (auto& w : watchers_) {
    w->stop = true;
    w->wake->release();
  }
}

}  // namespace partune::sim
