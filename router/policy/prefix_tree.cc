#include "router/policy/prefix_tree.h"

#include <algorithm>
#include <queue>
#include <set>
#include <utility>

namespace tandem::router {

struct PrefixTree::Node {
  std::vector<int32_t> key;  // the edge from the parent; empty only at the root
  Node* parent = nullptr;
  std::map<int32_t, std::unique_ptr<Node>> children;  // by the first token of their key
  std::map<std::string, uint64_t> tenants;            // tenant -> last access tick
};

namespace {

size_t CommonPrefix(const std::vector<int32_t>& key, std::span<const int32_t> tokens) {
  size_t n = std::min(key.size(), tokens.size());
  size_t i = 0;
  while (i < n && key[i] == tokens[i]) ++i;
  return i;
}

}  // namespace

PrefixTree::PrefixTree() : root_(std::make_unique<Node>()) {}

PrefixTree::~PrefixTree() {
  // Iterative, so a very deep tree cannot overflow the stack through recursive destructors.
  std::vector<std::unique_ptr<Node>> stack;
  stack.push_back(std::move(root_));
  while (!stack.empty()) {
    std::unique_ptr<Node> node = std::move(stack.back());
    stack.pop_back();
    for (auto& [first, child] : node->children) stack.push_back(std::move(child));
  }
}

PrefixTree::Node* PrefixTree::Split(Node* node, size_t at) {
  auto mid = std::make_unique<Node>();
  mid->key.assign(node->key.begin(), node->key.begin() + static_cast<ptrdiff_t>(at));
  mid->tenants = node->tenants;  // the same tenants hold the shorter prefix: counts unchanged
  Node* parent = node->parent;
  mid->parent = parent;
  std::unique_ptr<Node>& slot = parent->children[node->key[0]];
  std::unique_ptr<Node> owned = std::move(slot);
  owned->key.erase(owned->key.begin(), owned->key.begin() + static_cast<ptrdiff_t>(at));
  owned->parent = mid.get();
  Node* result = mid.get();
  mid->children.emplace(owned->key[0], std::move(owned));
  slot = std::move(mid);
  ++node_count_;
  return result;
}

void PrefixTree::Insert(std::span<const int32_t> tokens, const std::string& tenant) {
  uint64_t tick = ++tick_;
  int64_t& stored = tenant_tokens_[tenant];
  auto touch = [&](Node* node) {
    auto [it, added] = node->tenants.emplace(tenant, tick);
    if (added) {
      stored += static_cast<int64_t>(node->key.size());
      total_tokens_ += static_cast<int64_t>(node->key.size());
    } else {
      it->second = tick;
    }
  };
  Node* node = root_.get();
  size_t pos = 0;
  while (pos < tokens.size()) {
    auto it = node->children.find(tokens[pos]);
    if (it == node->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->key.assign(tokens.begin() + static_cast<ptrdiff_t>(pos), tokens.end());
      leaf->parent = node;
      Node* raw = leaf.get();
      node->children.emplace(tokens[pos], std::move(leaf));
      ++node_count_;
      touch(raw);
      return;
    }
    Node* child = it->second.get();
    size_t common = CommonPrefix(child->key, tokens.subspan(pos));
    if (common < child->key.size()) child = Split(child, common);
    touch(child);
    pos += common;
    node = child;
  }
}

PrefixTree::Match PrefixTree::MatchPrefix(std::span<const int32_t> tokens,
                                          const std::vector<std::string>& candidates) {
  std::set<std::string_view> wanted(candidates.begin(), candidates.end());
  // Per candidate: matched tokens and the tick at its deepest matched node.
  std::map<std::string_view, std::pair<int64_t, uint64_t>> found;
  Node* node = root_.get();
  size_t pos = 0;
  while (pos < tokens.size()) {
    auto it = node->children.find(tokens[pos]);
    if (it == node->children.end()) break;
    Node* child = it->second.get();
    size_t common = CommonPrefix(child->key, tokens.subspan(pos));
    for (const auto& [tenant, tick] : child->tenants) {
      if (wanted.count(tenant) != 0) {
        found[tenant] = {static_cast<int64_t>(pos + common), tick};
      }
    }
    if (common < child->key.size()) break;
    pos += common;
    node = child;
  }
  Match best;
  uint64_t best_tick = 0;
  for (const auto& [tenant, value] : found) {
    if (value.first > best.matched || (value.first == best.matched && value.second > best_tick)) {
      best.tenant = std::string(tenant);
      best.matched = value.first;
      best_tick = value.second;
    }
  }
  return best;
}

void PrefixTree::RemoveTenantAt(Node* node, const std::string& tenant) {
  if (node->tenants.erase(tenant) == 0) return;
  auto size = static_cast<int64_t>(node->key.size());
  tenant_tokens_[tenant] -= size;
  total_tokens_ -= size;
}

void PrefixTree::PruneIfEmpty(Node* node) {
  if (node == root_.get() || !node->tenants.empty() || !node->children.empty()) return;
  node->parent->children.erase(node->key[0]);  // frees `node`
  --node_count_;
}

int64_t PrefixTree::EvictTenantToSize(const std::string& tenant, int64_t max_tokens) {
  auto sit = tenant_tokens_.find(tenant);
  if (sit == tenant_tokens_.end() || sit->second <= max_tokens) return 0;
  int64_t before = sit->second;
  auto holds_in_child = [&](Node* node) {
    for (const auto& [first, child] : node->children) {
      if (child->tenants.count(tenant) != 0) return true;
    }
    return false;
  };
  // The tenant's leaves, least recently used first.
  using Entry = std::pair<uint64_t, Node*>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> leaves;
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    bool leaf = true;
    for (const auto& [first, child] : node->children) {
      if (child->tenants.count(tenant) != 0) {
        stack.push_back(child.get());
        leaf = false;
      }
    }
    if (leaf && node != root_.get()) leaves.emplace(node->tenants.at(tenant), node);
  }
  while (sit->second > max_tokens && !leaves.empty()) {
    Node* node = leaves.top().second;
    leaves.pop();
    Node* parent = node->parent;
    RemoveTenantAt(node, tenant);
    PruneIfEmpty(node);
    if (parent != root_.get() && !holds_in_child(parent)) {
      leaves.emplace(parent->tenants.at(tenant), parent);
    }
  }
  return before - sit->second;
}

void PrefixTree::RemoveTenant(const std::string& tenant) {
  if (tenant_tokens_.count(tenant) == 0) return;
  // Pre-order, then children before parents so pruning works bottom-up.
  std::vector<Node*> order;
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    if (node != root_.get()) order.push_back(node);
    for (const auto& [first, child] : node->children) {
      if (child->tenants.count(tenant) != 0) stack.push_back(child.get());
    }
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    RemoveTenantAt(*it, tenant);
    PruneIfEmpty(*it);
  }
  tenant_tokens_.erase(tenant);
}

int64_t PrefixTree::TenantTokens(const std::string& tenant) const {
  auto it = tenant_tokens_.find(tenant);
  return it == tenant_tokens_.end() ? 0 : it->second;
}

std::vector<std::string> PrefixTree::Tenants() const {
  std::vector<std::string> out;
  for (const auto& [tenant, tokens] : tenant_tokens_) out.push_back(tenant);
  return out;
}

}  // namespace tandem::router
