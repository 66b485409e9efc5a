// SHA-256 known-answer vectors (FIPS 180-4 examples) and HMAC-SHA256 vectors from RFC 4231.
#include <gtest/gtest.h>

#include <string>

#include "core/common/hmac.h"

namespace hora {
namespace {

std::string hexOf(const std::string& s) { return toHex(sha256(s.data(), s.size())); }

TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(hexOf(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hexOf("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hexOf("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hexOf("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                  "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(hexOf(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalMatchesOneShot) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<char>(i * 7));
  // Every split point around the 64-byte block and the 56-byte padding boundary.
  for (size_t split : {0, 1, 55, 56, 63, 64, 65, 127, 128, 500, 999, 1000}) {
    Sha256 h;
    h.update(data.data(), split);
    h.update(data.data() + split, data.size() - split);
    EXPECT_EQ(toHex(h.finish()), hexOf(data)) << "split " << split;
  }
  // Lengths around the padding boundary.
  for (size_t n = 50; n < 70; ++n) {
    Sha256 h;
    for (size_t i = 0; i < n; ++i) h.update(data.data() + i, 1);
    EXPECT_EQ(toHex(h.finish()), hexOf(data.substr(0, n))) << "length " << n;
  }
}

std::string hmacHex(const std::string& key, const std::string& data) {
  return toHex(hmacSha256(key, data));
}

TEST(HmacSha256, Rfc4231) {
  EXPECT_EQ(hmacHex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hmacHex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hmacHex(std::string(20, '\xaa'), std::string(50, '\xdd')),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4.push_back(static_cast<char>(i));
  EXPECT_EQ(hmacHex(key4, std::string(50, '\xcd')),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Test case 5 compares the first 128 bits only.
  EXPECT_EQ(hmacHex(std::string(20, '\x0c'), "Test With Truncation").substr(0, 32),
            "a3b6167473100ee06e0c796c2955552b");
  EXPECT_EQ(
      hmacHex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
      "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(
      hmacHex(
          std::string(131, '\xaa'),
          "This is a test using a larger than block-size key and a larger than block-size data. "
          "The key needs to be hashed before being used by the HMAC algorithm."),
      "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(HmacSha256, EmptyKeyAndConstantTimeEqual) {
  EXPECT_EQ(hmacHex("", ""), "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
  Sha256Digest a = sha256("x", 1), b = sha256("x", 1), c = sha256("y", 1);
  EXPECT_TRUE(constantTimeEqual(a.data(), b.data(), a.size()));
  EXPECT_FALSE(constantTimeEqual(a.data(), c.data(), a.size()));
}

}  // namespace
}  // namespace hora
