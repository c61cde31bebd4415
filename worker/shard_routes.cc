#include "worker/shard_routes.h"

namespace pstrain {

std::vector<int> ChooseRoutes(int num_shards, const std::vector<PsView>& ps) {
  std::vector<int> route(num_shards, -1);
  std::vector<int64_t> best_term(num_shards, -1);
  for (int j = 0; j < static_cast<int>(ps.size()); ++j) {
    if (!ps[j].answered) continue;
    for (const proto::ShardPlacement& p : ps[j].hosted) {
      const int k = p.shard();
      if (k < 0 || k >= num_shards) continue;
      // Higher term wins; on a tie, the shard's own ps.
      if (p.term() > best_term[k] || (p.term() == best_term[k] && j == k)) {
        best_term[k] = p.term();
        route[k] = j;
      }
    }
  }
  for (int k = 0; k < num_shards && k < static_cast<int>(ps.size()); ++k) {
    if (route[k] < 0 && ps[k].answered) route[k] = k;
  }
  return route;
}

void KeepPinnedRoutes(const std::vector<PsView>& ps, std::vector<int>* pinned,
                      std::vector<int>* routes) {
  for (size_t k = 0; k < routes->size() && k < pinned->size(); ++k) {
    const int p = (*pinned)[k];
    if (p < 0) continue;
    if ((*routes)[k] == p) {
      (*pinned)[k] = -1;  // the views say so too now
    } else if (p < static_cast<int>(ps.size()) && ps[p].answered) {
      (*routes)[k] = p;
    }
  }
}

int64_t ListedTerm(const PsView& view, int shard) {
  for (const proto::ShardPlacement& p : view.hosted) {
    if (p.shard() == shard) return p.term();
  }
  return -1;
}

int FirstOutrankedRoute(const std::vector<int>& in_use, const std::vector<int>& chosen,
                        const std::vector<PsView>& ps) {
  const int n = static_cast<int>(ps.size());
  for (size_t k = 0; k < in_use.size() && k < chosen.size(); ++k) {
    const int from = in_use[k];
    const int to = chosen[k];
    if (from < 0 || to < 0 || from == to || from >= n || to >= n) continue;
    const int64_t term = ListedTerm(ps[to], static_cast<int>(k));
    if (term >= 0 && term > ListedTerm(ps[from], static_cast<int>(k))) return static_cast<int>(k);
  }
  return -1;
}

}  // namespace pstrain
