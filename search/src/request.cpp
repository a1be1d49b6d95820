// A search as a front end asks for it (request.hpp).
#include "partune/search/request.hpp"

namespace partune::search {

SearchReport run_search(const Job& base, const std::string& origin, const SearchRequest& request) {
  const SearchSpace space = requested_space(base, origin, request.fix);
  check_filters(request.explain, "--explain");
  SearchOptions options = request.options;
  options.simulate = !request.estimator_only;
  options.auto_partition = !request.uniform_stages;
  return run_search(base, space, options);
}

}  // namespace partune::search
