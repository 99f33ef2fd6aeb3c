// PrefixTree: the approximate radix tree behind the cache_aware policy (SGLang router's model),
// over token ids. One tree holds every worker's ("tenant's") prefixes: each node records which
// tenants sent a request through it and when, so a lookup finds, for each worker, how much of a
// prompt that worker has probably cached. It approximates the workers' real radix caches: it
// sees only what the router sent, not what the workers evicted.
//
//   PrefixTree tree;
//   tree.Insert(ids, "http://w1:30001");
//   PrefixTree::Match m = tree.MatchPrefix(ids, {"http://w1:30001", "http://w2:30001"});
//   tree.EvictTenantToSize("http://w1:30001", max_tokens);   // drop its LRU leaves
//
// Invariant: a tenant present at a node is present at all its ancestors, so a tenant's stored
// tokens are a subtree; eviction removes the tenant from its least recently used leaves first,
// and nodes no tenant holds any more are freed.
//
// Thread-safety: thread-compatible (the policy serializes calls under its mutex). Not copyable.
#ifndef TANDEM_ROUTER_POLICY_PREFIX_TREE_H_
#define TANDEM_ROUTER_POLICY_PREFIX_TREE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tandem::router {

class PrefixTree {
 public:
  PrefixTree();
  ~PrefixTree();
  PrefixTree(const PrefixTree&) = delete;
  PrefixTree& operator=(const PrefixTree&) = delete;

  struct Match {
    std::string tenant;   // the candidate with the longest match ("" when none matched a token)
    int64_t matched = 0;  // its matched tokens
  };

  // Records that `tenant` was sent `tokens` (marks the path as just used by it).
  void Insert(std::span<const int32_t> tokens, const std::string& tenant);
  // The candidate whose stored prefix covers most of `tokens`; ties go to the most recently used.
  Match MatchPrefix(std::span<const int32_t> tokens, const std::vector<std::string>& candidates);
  // Removes the tenant's least recently used leaves until it stores at most `max_tokens`.
  // Returns the tokens evicted.
  int64_t EvictTenantToSize(const std::string& tenant, int64_t max_tokens);
  // Forgets the tenant everywhere.
  void RemoveTenant(const std::string& tenant);

  // Tokens stored for `tenant` (0 if unknown), and over all tenants.
  int64_t TenantTokens(const std::string& tenant) const;
  int64_t TotalTokens() const { return total_tokens_; }
  std::vector<std::string> Tenants() const;
  // Nodes in the tree, the root included (for tests of pruning).
  int64_t NodeCount() const { return node_count_; }

 private:
  struct Node;
  Node* Split(Node* node, size_t at);
  void RemoveTenantAt(Node* node, const std::string& tenant);
  void PruneIfEmpty(Node* node);

  std::unique_ptr<Node> root_;
  std::map<std::string, int64_t> tenant_tokens_;
  int64_t total_tokens_ = 0;
  int64_t node_count_ = 1;
  uint64_t tick_ = 0;  // logical clock for LRU order
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_POLICY_PREFIX_TREE_H_
