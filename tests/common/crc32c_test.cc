// CRC-32C against the standard check values (RFC 3720, appendix B.4, and
// the catalogue's "123456789"), and TFRecord's mask.

#include "common/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(Crc32c, MatchesRfc3720CheckValues) {
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(descending), 0x113FDB5Cu);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32c, ExtendsAcrossPieces) {
  const std::string all = "the parameter server paper, OSDI 2014";
  for (size_t cut = 0; cut <= all.size(); ++cut) {
    EXPECT_EQ(Crc32cExtend(Crc32c(all.substr(0, cut)), all.substr(cut)), Crc32c(all)) << cut;
  }
}

TEST(Crc32c, MaskIsTfRecordsAndUnmasks) {
  EXPECT_EQ(MaskCrc(0), 0xA282EAD8u);
  const uint32_t c = Crc32c("123456789");
  EXPECT_EQ(MaskCrc(c), (((c >> 15) | (c << 17)) + 0xA282EAD8u));
  EXPECT_NE(MaskCrc(c), c);
  EXPECT_EQ(UnmaskCrc(MaskCrc(c)), c);
  EXPECT_EQ(UnmaskCrc(MaskCrc(0xFFFFFFFFu)), 0xFFFFFFFFu);
}

}  // namespace
}  // namespace pstrain
