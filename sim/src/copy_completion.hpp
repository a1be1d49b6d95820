#pragma once
// Private to sim/: completion actors for one rank's memory copies. Each waits for one copy
// at a time and reports its end; idle ones are reused, so a rank creates only as many as
// it has copies in flight at once.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "world.hpp"

namespace partune::sim {

class CopyCompletion {
 public:
  // `report(index)` runs on a completion actor when the copy issued as instruction
  // `index` has completed.
  CopyCompletion(s4u::Host* host, std::string name, std::function<void(int index)> report);
  // After the program has started `copy`.
  void watch(s4u::CommPtr copy, int index);
  // At the program's end: each actor exits once its copy (if any) is over.
  void stop();

 private:
  struct Watcher {
    s4u::SemaphorePtr wake = s4u::Semaphore::create(0);
    s4u::CommPtr copy;
    int index = -1;
    bool stop = false;
  };
  void run(Watcher& w);

  s4u::Host* host_;
  std::string name_;
  std::function<void(int)> report_;
  std::vector<std::unique_ptr<Watcher>> watchers_;
  std::vector<Watcher*> idle_;
};

}  // namespace partune::sim
