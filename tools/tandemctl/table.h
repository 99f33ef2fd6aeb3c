// Table: aligned plain-text tables for tandemctl's terminal output.
//
// Columns are as wide as their widest cell (counted in UTF-8 code points), separated by two
// spaces; a cell that reads as a number ("12", "-3.5", "0.25s", "97%") is right-aligned, any other
// cell left-aligned; a "-" placeholder is right-aligned in a column that holds numbers. A row
// shorter than the header is padded with empty cells; a longer row adds columns with an empty
// header. Value type, not thread-safe.
#ifndef TANDEM_TOOLS_TANDEMCTL_TABLE_H_
#define TANDEM_TOOLS_TANDEMCTL_TABLE_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::ctl {

class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

  void AddRow(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  size_t rows() const { return rows_.size(); }

  // The header line, then one line per row, each ending in '\n'. Trailing spaces are trimmed.
  std::string Render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// Code points in a UTF-8 string (bytes that are not continuation bytes).
size_t DisplayWidth(std::string_view text);
// True for cells shown right-aligned: an optional sign, digits with at most one '.', and an
// optional unit suffix among "s", "ms", "%".
bool LooksNumeric(std::string_view cell);

}  // namespace tandem::ctl

#endif  // TANDEM_TOOLS_TANDEMCTL_TABLE_H_
