#include "common/ordered_json.h"

#include <cstddef>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace tandem {
namespace {

using Ordered = nlohmann::ordered_json;

// nlohmann's SAX interface, building the value with a hash index of each open object's keys.
class OrderedBuilder {
 public:
  bool null() { return Put(Ordered(nullptr)); }
  bool boolean(bool value) { return Put(Ordered(value)); }
  bool number_integer(Ordered::number_integer_t value) { return Put(Ordered(value)); }
  bool number_unsigned(Ordered::number_unsigned_t value) { return Put(Ordered(value)); }
  bool number_float(Ordered::number_float_t value, const Ordered::string_t& /*text*/) {
    return Put(Ordered(value));
  }
  bool string(Ordered::string_t& value) { return Put(Ordered(std::move(value))); }
  bool binary(Ordered::binary_t& value) { return Put(Ordered::binary(std::move(value))); }
  bool start_object(std::size_t /*elements*/) { return Open(Ordered::object()); }
  bool key(Ordered::string_t& key) {
    open_.back().key = std::move(key);
    return true;
  }
  bool end_object() { return Close(); }
  bool start_array(std::size_t /*elements*/) { return Open(Ordered::array()); }
  bool end_array() { return Close(); }
  template <class Exception>
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const Exception& error) {
    throw error;
  }

  Ordered Take() { return std::move(root_); }

 private:
  struct Container {
    Ordered value;
    absl::flat_hash_map<std::string, size_t> index;  // objects: a key's place among the members
    std::string key;                                 // objects: the key of the next value
  };

  bool Put(Ordered value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return true;
    }
    Container& parent = open_.back();
    if (parent.value.is_array()) {
      parent.value.get_ref<Ordered::array_t&>().push_back(std::move(value));
      return true;
    }
    Ordered::object_t& members = parent.value.get_ref<Ordered::object_t&>();
    const auto [at, added] = parent.index.try_emplace(parent.key, members.size());
    if (added) {
      // ordered_map is a vector of members: appended here without its search for the key.
      members.emplace_back(std::move(parent.key), std::move(value));
    } else {
      std::next(members.begin(), static_cast<std::ptrdiff_t>(at->second))->second =
          std::move(value);
    }
    return true;
  }
  bool Open(Ordered value) {
    open_.push_back({std::move(value), {}, {}});
    return true;
  }
  bool Close() {
    Ordered value = std::move(open_.back().value);
    open_.pop_back();
    return Put(std::move(value));
  }

  std::vector<Container> open_;
  Ordered root_;
};

}  // namespace

nlohmann::ordered_json ParseOrderedJson(std::string_view text) {
  OrderedBuilder builder;
  Ordered::sax_parse(text.begin(), text.end(), &builder);
  return builder.Take();
}

}  // namespace tandem
