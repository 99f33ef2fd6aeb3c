#include "common/flags.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/version.h"
#include "yaml-cpp/yaml.h"

namespace tandem {
namespace flags_internal {
namespace {

std::string Got(const std::string& what, const std::string& text) {
  return absl::StrCat("expects ", what, ", got '", text, "'");
}

}  // namespace

std::string CheckSignedInteger(const std::string& text, int64_t min, int64_t max) {
  const std::string range = absl::StrCat("an integer in [", min, ", ", max, "]");
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if (begin != end && *begin == '+') ++begin;
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec == std::errc::result_out_of_range) return Got(range, text);
  if (ec != std::errc() || ptr != end || begin == end) return Got("an integer", text);
  if (value < min || value > max) return Got(range, text);
  return "";
}

std::string CheckUnsignedInteger(const std::string& text, uint64_t max) {
  const std::string range = absl::StrCat("an integer in [0, ", max, "]");
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if (begin != end && *begin == '+') ++begin;
  if (begin != end && *begin == '-') {
    // A negative number is a range error, anything else after '-' is not a number at all.
    int64_t ignored = 0;
    auto [ptr, ec] = std::from_chars(begin, end, ignored);
    if ((ec == std::errc() || ec == std::errc::result_out_of_range) && ptr == end) {
      return Got(range, text);
    }
    return Got("an integer", text);
  }
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec == std::errc::result_out_of_range) return Got(range, text);
  if (ec != std::errc() || ptr != end || begin == end) return Got("an integer", text);
  if (value > max) return Got(range, text);
  return "";
}

std::string CheckFloat(const std::string& text) {
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if (begin != end && *begin == '+') ++begin;
  double value = 0;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || begin == end || !std::isfinite(value)) {
    return Got("a number", text);
  }
  return "";
}

}  // namespace flags_internal

namespace {

constexpr char kStrictValidatorName[] = "tandem-strict-number";

std::string NormalizeKey(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

// "config.yaml:3: " from a node's position (yaml-cpp lines are 0-based).
std::string Where(const std::string& path, const YAML::Mark& mark) {
  if (mark.is_null()) return absl::StrCat(path, ": ");
  return absl::StrCat(path, ":", mark.line + 1, ": ");
}

// Appends the scalars of `node` (depth first) to `tokens`; on a mapping or a null returns an
// error text (without position).
std::string Flatten(const YAML::Node& node, std::vector<std::string>* tokens) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      tokens->push_back(node.Scalar());
      return "";
    case YAML::NodeType::Sequence:
      for (const YAML::Node& item : node) {
        std::string error = Flatten(item, tokens);
        if (!error.empty()) return error;
      }
      return "";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "no value";
  }
  return "no value";
}

}  // namespace

// Reads the --config YAML file into CLI11 config items, checking every key and value first so
// that errors name the file and the line.
class Flags::YamlConfig : public CLI::Config {
 public:
  explicit YamlConfig(Flags* flags) : flags_(flags) {}

  std::string to_config(const CLI::App*, bool, bool, std::string) const override {
    return "";  // Writing config files is not supported.
  }

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    const std::string path = flags_->config_path();
    const std::string text{std::istreambuf_iterator<char>(input), std::istreambuf_iterator<char>()};
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      throw CLI::ConfigError(absl::StrCat(Where(path, e.mark), "invalid YAML: ", e.msg));
    }
    if (root.IsNull()) return {};  // An empty file sets nothing.
    if (!root.IsMap()) {
      throw CLI::ConfigError(absl::StrCat(
          Where(path, root.Mark()), "expected a mapping of option names to values at top level"));
    }

    CLI::App& app = flags_->app_;
    std::map<std::string, CLI::Option*> options;
    for (CLI::Option* option : app.get_options()) {
      for (const std::string& name : option->get_lnames()) options[NormalizeKey(name)] = option;
    }
    std::map<CLI::Option*, int> seen_at_line;
    std::vector<CLI::ConfigItem> items;
    for (const auto& entry : root) {
      const YAML::Node& key_node = entry.first;
      const YAML::Node& value = entry.second;
      const std::string where = Where(path, key_node.Mark());
      if (!key_node.IsScalar()) throw CLI::ConfigError(where + "keys must be option names");
      const std::string key = key_node.Scalar();
      auto it = options.find(NormalizeKey(key));
      if (it == options.end()) {
        throw CLI::ConfigError(absl::StrCat(where, "unknown key '", key, "'"));
      }
      CLI::Option* option = it->second;
      if (!option->get_configurable()) {
        throw CLI::ConfigError(
            absl::StrCat(where, "key '", key, "' cannot be set in a config file"));
      }
      auto [seen, inserted] = seen_at_line.emplace(option, key_node.Mark().line + 1);
      if (!inserted) {
        throw CLI::ConfigError(
            absl::StrCat(where, "key '", key, "' given twice (first on line ", seen->second, ")"));
      }
      // A missing value has the mark of whatever follows it; report the key's line then.
      const bool has_value = value.IsDefined() && !value.IsNull();
      items.push_back(MakeItem(option, key, value, has_value ? Where(path, value.Mark()) : where));
    }
    return items;
  }

 private:
  CLI::ConfigItem MakeItem(CLI::Option* option, const std::string& key, const YAML::Node& value,
                           const std::string& where) const {
    std::vector<std::string> tokens;
    std::string shape_error = Flatten(value, &tokens);
    if (!shape_error.empty()) {
      throw CLI::ConfigError(absl::StrCat(where, "key '", key, "' has ", shape_error));
    }
    const bool is_flag = option->get_expected_max() == 0;  // add_flag: takes no argument
    if (is_flag) {
      if (tokens.size() != 1 || !value.IsScalar()) {
        throw CLI::ConfigError(absl::StrCat(where, "key '", key, "' expects true or false"));
      }
      const std::string lower = absl::AsciiStrToLower(tokens[0]);
      if (lower != "true" && lower != "false") {
        throw CLI::ConfigError(absl::StrCat(where, "key '", key, "' ",
                                            flags_internal::Got("true or false", tokens[0])));
      }
      tokens[0] = lower;
    } else {
      const int max_items = option->get_items_expected_max();
      const int min_items = option->get_items_expected_min();
      if (max_items <= 1 && !value.IsScalar()) {
        throw CLI::ConfigError(
            absl::StrCat(where, "key '", key, "' expects a single value, got a sequence"));
      }
      if (static_cast<int>(tokens.size()) < min_items) {
        throw CLI::ConfigError(absl::StrCat(where, "key '", key, "' expects at least ", min_items,
                                            " values, got ", tokens.size()));
      }
      for (const std::string& token : tokens) CheckValidators(option, key, token, where);
    }
    CLI::ConfigItem item;
    item.name = option->get_lnames().front();
    item.inputs = std::move(tokens);
    return item;
  }

  // Runs the option's validators (ours and the caller's ->check(...)) on a copy of `token`, so
  // a failure is reported with the file and line rather than by CLI11 without them.
  static void CheckValidators(CLI::Option* option, const std::string& key, const std::string& token,
                              const std::string& where) {
    for (int i = 0;; ++i) {
      CLI::Validator* validator;
      try {
        validator = option->get_validator(i);
      } catch (const CLI::OptionNotFound&) {
        return;
      }
      if (!validator->get_active()) continue;
      std::string copy = token;
      std::string error = (*validator)(copy);
      if (error.empty()) continue;
      const char* separator = validator->get_name() == kStrictValidatorName ? " " : ": ";
      throw CLI::ConfigError(absl::StrCat(where, "key '", key, "'", separator, error));
    }
  }

  Flags* flags_;  // Not owned; owns this object through app_.
};

Flags::Flags(std::string program, std::string description)
    : program_(std::move(program)), app_(std::move(description), program_) {
  app_.set_config("--config", "", "YAML file of options (keys are flag names); flags win")
      ->type_name("FILE");
  app_.config_formatter(std::make_shared<YamlConfig>(this));
  app_.set_version_flag("--version", absl::StrCat(program_, " ", kTandemVersion));
  app_.add_option(
          "--log-level", log_level_,
          absl::StrCat("Log level: ", kLogLevelNames, "; default: $", kLogLevelEnv, ", else info"))
      ->check(CLI::Validator(
          [](std::string& s) {
            absl::StatusOr<spdlog::level::level_enum> level = ParseLogLevel(s);
            return level.ok() ? std::string() : std::string(level.status().message());
          },
          "", "log-level"));
  app_.get_formatter()->column_width(40);
}

Flags::~Flags() = default;

CLI::Option* Flags::AddIgnoredSwitch(const std::string& flag, const std::string& note) {
  bool* on = &switches_.emplace_back(false);
  CLI::Option* option = app_.add_flag(flag, *on, note);
  ignored_.push_back({option, on, note});
  return option;
}

CLI::Option* Flags::AddRefused(const std::string& flag, bool takes_value, const std::string& why) {
  const std::string help = absl::StrCat("Refused: ", why);
  if (!takes_value) {
    bool* on = &switches_.emplace_back(false);
    CLI::Option* option = app_.add_flag(flag, *on, help);
    refused_switches_.push_back({option, on, why});
    return option;
  }
  CLI::Option* option = app_.add_option(flag, CLI::callback_t(), help, false);
  option->expected(1, CLI::detail::expected_max_vector_size);
  option->allow_extra_args();
  option->type_name("VALUES");
  option->check(CLI::Validator([why](std::string&) { return why; }, "", "tandem-refused"));
  return option;
}

std::vector<std::string> Flags::IgnoredNotes() const {
  std::vector<std::string> notes;
  for (const Noted& n : ignored_) {
    if (n.option->count() == 0 || (n.on != nullptr && !*n.on)) continue;
    std::string given = n.option->get_name();
    if (n.on == nullptr) {
      for (const std::string& value : n.option->results()) absl::StrAppend(&given, " ", value);
    }
    notes.push_back(absl::StrCat(given, ": ", n.text));
  }
  return notes;
}

void Flags::CheckRefusedSwitches() const {
  for (const Noted& n : refused_switches_) {
    if (*n.on) throw CLI::ValidationError(n.option->get_name(), n.text);
  }
}

std::string Flags::config_path() const {
  const CLI::Option* option = app_.get_config_ptr();
  if (option == nullptr || option->results().empty()) return "";
  return option->results().back();
}

template <typename Fn>
std::optional<int> Flags::Run(Fn&& parse) {
  error_.clear();
  try {
    parse();
    return std::nullopt;
  } catch (const CLI::CallForHelp&) {
    *out_ << app_.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    *out_ << app_.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    *out_ << e.what() << "\n";
    return 0;
  } catch (const CLI::FileError&) {
    const std::string path = config_path();
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      error_ = absl::StrCat(path, ": cannot read config file: ", std::strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
      error_ = absl::StrCat(path, ": cannot read config file: it is a directory");
    } else {
      std::ifstream probe(path);
      error_ = absl::StrCat(path, ": cannot read config file: ",
                            probe.good() ? "unknown error" : std::strerror(errno));
    }
  } catch (const CLI::ParseError& e) {
    error_ = e.what();
  } catch (const std::exception& e) {
    // A caller's option callback may throw anything; it is still a bad invocation.
    error_ = e.what();
  }
  *err_ << program_ << ": error: " << error_ << "\nRun with --help for more information.\n";
  return 2;
}

std::optional<int> Flags::Parse(int argc, char** argv) {
  return Run([&] {
    app_.parse(argc, argv);
    CheckRefusedSwitches();
  });
}

std::optional<int> Flags::Parse(const std::vector<std::string>& args) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back.
  return Run([&] {
    app_.parse(reversed);
    CheckRefusedSwitches();
  });
}

}  // namespace tandem
