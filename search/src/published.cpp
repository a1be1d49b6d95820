#include "partune/search/published.hpp"

#include "partune/sim/simulator.hpp"

namespace partune::search {

std::vector<PublishedComparison> compare_with_published(const std::vector<Table>& tables, const SearchOptions& options) {
  std::vector<PublishedComparison> out;
  for (const Table& t : tables)
    for (const TableRow& row : t.rows) {
      if (row.has_baseline) continue;
      PublishedComparison c;
      c.table = t.name;
      c.row = row.name;
      c.published_configuration = describe(row.job);
      // A simulation brings the estimator's figures back with its own: whether it fits is
      // the estimator's word either way.
      StepMetrics published, estimated;
      if (options.simulate) {
        const sim::SimResult r = sim::simulate(row.job);
        published = r.metrics, estimated = r.estimated;
      } else {
        published = estimated = estimate(row.job);
      }
      c.published_samples_per_s = published.samples_per_s;
      c.published_fits = estimated.fits;
      const SearchReport report = run_search(row.job, SearchSpace{}, options);
      if (!report.ranked.empty()) {
        const Candidate& best = report.ranked.front();
        c.found_configuration = best.configuration;
        c.found_samples_per_s = (best.simulated ? best.simulation : best.estimate).samples_per_s;
        c.simulated = options.simulate && best.simulated;
      }
      out.push_back(c);
    }
  return out;
}

}  // namespace partune::search
