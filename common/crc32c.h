#pragma once

// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected), as iSCSI (RFC
// 3720) and TFRecord files use it, and TFRecord's masking of a stored CRC
// (a CRC of data that itself holds CRCs is weak; the mask rotates and adds
// a constant). Software, one table, 8 bits at a time: fast enough for
// metrics files.

#include <cstdint>

#include "absl/strings/string_view.h"

namespace pstrain {

// The CRC-32C of `data` (the standard check value: "123456789" ->
// 0xE3069283).
uint32_t Crc32c(absl::string_view data);

// Continues a CRC over more data: Crc32cExtend(Crc32c(a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, absl::string_view data);

// TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
inline uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t UnmaskCrc(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace pstrain
