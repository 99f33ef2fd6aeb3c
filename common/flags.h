// Flags: a daemon's command-line options (CLI11) plus a YAML config file given by --config FILE.
//
// Usage, in a daemon's main():
//   tandem::Flags flags("tandem-decode", "Decode worker");
//   int port = 8001;
//   std::string model_path;
//   flags.Add("--port", &port, "gRPC port")->check(CLI::Range(1, 65535));
//   flags.Add("--model-path", &model_path, "Hugging Face model directory")->required();
//   if (auto exit_code = flags.Parse(argc, argv)) return *exit_code;
//   RETURN_IF_ERROR(InitLogging("tandem-decode", flags.log_level()));
//
// Every Flags object registers three options itself: --config FILE, --log-level LEVEL (see
// common/logging.h) and --version.
//
// The config file is a YAML mapping. Its keys are the flag names without the leading dashes, and
// `-` and `_` are interchangeable (`model-path` == `model_path`). Values are scalars, or sequences
// for multi-value options; nested sequences are flattened to the option's string tokens, e.g. the
// router's `prefill: [["http://h:8000", 8998], ["http://g:8000", 8998]]` gives the same tokens as
// `--prefill http://h:8000 8998 --prefill http://g:8000 8998`. Boolean flags take true or false.
// Precedence: a flag given on the command line wins over the file; the file wins over defaults.
// Values from the file go through the same conversion and validators (->check(...)) as on the
// command line. Every error names the file and line:
//   config.yaml:3: unknown key 'modle-path'
//   config.yaml:5: key 'port' expects an integer, got 'abc'
//   config.yaml:5: key 'port' expects an integer in [0, 65535], got '70000'
//
// Integer and floating-point options are parsed strictly on the command line and in the file:
// decimal only, whole string, in range of the bound type (so `--port -1` into a uint16_t fails
// instead of wrapping).
//
// Flags of other servers' launch lines (SGLang's) that Tandem accepts without acting on them are
// registered with AddIgnored / AddIgnoredSwitch: their values are checked like any other (a typo'd
// number is an error) and, when given, IgnoredNotes() has one line naming the flag and why it has
// no effect, for the daemon to log once logging is up. Flags asking for something Tandem does not
// do are registered with AddRefused: giving one (on the command line or in the file) is an error
// naming it and saying why.
//
// Not thread-safe; used once, on the main thread, before the daemon starts. The bound variables
// (the pointers given to Add) are owned by the caller and must outlive Parse().
#ifndef TANDEM_COMMON_FLAGS_H_
#define TANDEM_COMMON_FLAGS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "CLI/CLI.hpp"

namespace tandem {

namespace flags_internal {

// Returns "" when `text` is a valid value for the option's element type, else a short
// description of what was expected, e.g. "expects an integer in [0, 65535], got '70000'".
std::string CheckSignedInteger(const std::string& text, int64_t min, int64_t max);
std::string CheckUnsignedInteger(const std::string& text, uint64_t max);
std::string CheckFloat(const std::string& text);

template <typename T>
struct IsVector : std::false_type {};
template <typename T, typename A>
struct IsVector<std::vector<T, A>> : std::true_type {};

template <typename T>
struct ElementType {
  using type = T;
};
template <typename T, typename A>
struct ElementType<std::vector<T, A>> {
  using type = T;
};

// A CLI11 validator enforcing strict numeric syntax and the range of E; none for other types.
template <typename E>
std::optional<CLI::Validator> StrictValidator() {
  if constexpr (std::is_same_v<E, bool> || std::is_same_v<E, char> ||
                std::is_same_v<E, unsigned char> || std::is_same_v<E, signed char>) {
    return std::nullopt;
  } else if constexpr (std::is_integral_v<E> && std::is_signed_v<E>) {
    return CLI::Validator(
        [](std::string& s) {
          return CheckSignedInteger(s, std::numeric_limits<E>::min(),
                                    std::numeric_limits<E>::max());
        },
        "", "tandem-strict-number");
  } else if constexpr (std::is_integral_v<E>) {
    return CLI::Validator(
        [](std::string& s) { return CheckUnsignedInteger(s, std::numeric_limits<E>::max()); }, "",
        "tandem-strict-number");
  } else if constexpr (std::is_floating_point_v<E>) {
    return CLI::Validator([](std::string& s) { return CheckFloat(s); }, "", "tandem-strict-number");
  } else {
    return std::nullopt;
  }
}

}  // namespace flags_internal

class Flags {
 public:
  // `program` is the binary's name (used in --help, --version and error messages).
  Flags(std::string program, std::string description);
  ~Flags();
  Flags(const Flags&) = delete;
  Flags& operator=(const Flags&) = delete;

  // The underlying CLI11 app, for what Add does not cover (groups, excludes, subcommands are not
  // supported by the config file).
  CLI::App& app() { return app_; }

  // Registers "--name" bound to *value (int, int64_t, uint16_t, double, bool, std::string,
  // std::vector<std::string>, ...). *value's current content is the default shown by --help.
  // A bool is a flag: `--name` sets true, `--name=false` sets false. Returns the CLI11 option for
  // checks/defaults/required(). `value` is not owned and must outlive Parse().
  template <typename T>
  CLI::Option* Add(const std::string& flag, T* value, const std::string& help) {
    CLI::Option* option;
    if constexpr (std::is_same_v<T, bool>) {
      option = app_.add_flag(flag, *value, help);
    } else {
      option = app_.add_option(flag, *value, help);
      if constexpr (!flags_internal::IsVector<T>::value) option->capture_default_str();
      if (auto validator =
              flags_internal::StrictValidator<typename flags_internal::ElementType<T>::type>()) {
        option->check(*validator);
      }
    }
    return option;
  }

  // Registers "--name" (aliases after commas: "--tp-size,--tp") as accepted and without effect.
  // Its value must convert to E (strictly, as in Add); `many` takes one or more values. When
  // given, IgnoredNotes() holds "--name VALUE: <note>". Returns the option, e.g. for a
  // ->check(...) that refuses values Tandem cannot honour.
  template <typename E = std::string>
  CLI::Option* AddIgnored(const std::string& flag, const std::string& note, bool many = false) {
    CLI::Option* option = app_.add_option(flag, CLI::callback_t(), note, false);
    option->expected(1, many ? CLI::detail::expected_max_vector_size : 1);
    option->allow_extra_args(many);
    option->type_name(many ? "VALUES" : "VALUE");
    if (auto validator = flags_internal::StrictValidator<E>()) option->check(*validator);
    ignored_.push_back({option, nullptr, note});
    return option;
  }
  // The same for a switch (`--name`, `--name=false`); noted only when set true.
  CLI::Option* AddIgnoredSwitch(const std::string& flag, const std::string& note);
  // Registers "--name" as refused: Parse fails with "--name: <why>" when it is given (a switch:
  // when set true). `takes_value`: the flag takes one or more values, like its original.
  CLI::Option* AddRefused(const std::string& flag, bool takes_value, const std::string& why);
  // After Parse: one line per ignored flag that was given, e.g.
  //   "--cuda-graph-bs 8 16: ignored: CUDA graphs are a GPU launch optimisation".
  std::vector<std::string> IgnoredNotes() const;

  // Parses argv, then the --config file. Returns std::nullopt to continue, or the exit code the
  // program must exit with: 0 after --help/--version (text printed to stdout), 2 after printing a
  // clear error to stderr (bad flag, bad value, unreadable file, unknown key, wrong type).
  std::optional<int> Parse(int argc, char** argv);
  // The same on already split arguments, without the program name (used by tests and tools).
  std::optional<int> Parse(const std::vector<std::string>& args);

  // Where Parse prints help/version and errors; defaults to std::cout and std::cerr. Not owned.
  void SetOutput(std::ostream* out, std::ostream* err) {
    out_ = out;
    err_ = err;
  }

  // The last error Parse reported ("" if none), without the program-name prefix.
  const std::string& error() const { return error_; }
  // The --config path ("" when not given).
  std::string config_path() const;
  // The --log-level value ("" when not given: see InitLogging for the fallbacks).
  const std::string& log_level() const { return log_level_; }
  const std::string& program() const { return program_; }

 private:
  class YamlConfig;
  // An ignored or refused flag; `on` is the switch's value (null for flags with values).
  struct Noted {
    CLI::Option* option;
    bool* on;
    std::string text;
  };
  template <typename Fn>
  std::optional<int> Run(Fn&& parse);
  // Throws CLI::ValidationError for the first refused switch that is set.
  void CheckRefusedSwitches() const;

  std::string program_;
  CLI::App app_;
  std::string log_level_;
  std::ostream* out_ = &std::cout;
  std::ostream* err_ = &std::cerr;
  std::string error_;
  std::deque<bool> switches_;  // values of ignored and refused switches (stable addresses)
  std::vector<Noted> ignored_;
  std::vector<Noted> refused_switches_;
};

}  // namespace tandem

#endif  // TANDEM_COMMON_FLAGS_H_
