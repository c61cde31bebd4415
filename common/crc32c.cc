#include "common/crc32c.h"

#include <array>

namespace pstrain {
namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolyReflected : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, absl::string_view data) {
  uint32_t c = ~crc;
  for (const char ch : data) c = kTable[(c ^ static_cast<uint8_t>(ch)) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t Crc32c(absl::string_view data) { return Crc32cExtend(0, data); }

}  // namespace pstrain
