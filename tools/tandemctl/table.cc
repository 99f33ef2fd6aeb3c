#include "tools/tandemctl/table.h"

#include <algorithm>

namespace tandem::ctl {

size_t DisplayWidth(std::string_view text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

bool LooksNumeric(std::string_view cell) {
  for (std::string_view unit : {"ms", "s", "%"}) {
    if (cell.size() > unit.size() && cell.substr(cell.size() - unit.size()) == unit) {
      cell.remove_suffix(unit.size());
      break;
    }
  }
  if (!cell.empty() && (cell.front() == '-' || cell.front() == '+')) cell.remove_prefix(1);
  if (cell.empty()) return false;
  int digits = 0, dots = 0;
  for (char c : cell) {
    if (c >= '0' && c <= '9') {
      ++digits;
    } else if (c == '.') {
      ++dots;
    } else {
      return false;
    }
  }
  return digits > 0 && dots <= 1;
}

std::string Table::Render() const {
  size_t columns = headers_.size();
  for (const auto& row : rows_) columns = std::max(columns, row.size());
  std::vector<size_t> width(columns, 0);
  auto cell = [](const std::vector<std::string>& row, size_t i) -> std::string_view {
    return i < row.size() ? std::string_view(row[i]) : std::string_view();
  };
  for (size_t i = 0; i < columns; ++i) {
    width[i] = DisplayWidth(cell(headers_, i));
    for (const auto& row : rows_) width[i] = std::max(width[i], DisplayWidth(cell(row, i)));
  }
  // A placeholder "-" lines up with the numbers of its column.
  std::vector<bool> numeric_column(columns, false);
  for (size_t i = 0; i < columns; ++i) {
    for (const auto& row : rows_)
      numeric_column[i] = numeric_column[i] || LooksNumeric(cell(row, i));
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& row, bool header) {
    std::string text;
    for (size_t i = 0; i < columns; ++i) {
      std::string_view c = cell(row, i);
      const size_t pad = width[i] - DisplayWidth(c);
      if (i > 0) text += "  ";
      if (!header && (LooksNumeric(c) || (c == "-" && numeric_column[i]))) {
        text.append(pad, ' ');
        text += c;
      } else {
        text += c;
        text.append(pad, ' ');
      }
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text;
    out += '\n';
  };
  line(headers_, true);
  for (const auto& row : rows_) line(row, false);
  return out;
}

}  // namespace tandem::ctl
