// The control plane's framing, shared by the TCP and shared-memory control channels: whole frames
// are delivered in order, a partial one waits for the rest, and a bad header is refused before
// its payload arrives. The TCP control tree's reader also takes routed and subtree frames.
#include "core/transport/control_frames.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/net/frame.h"

namespace hora {
namespace {

std::string header(uint32_t magic, uint16_t type, uint32_t length) {
  net::FrameHeader h;
  h.magic = magic;
  h.type = type;
  h.length = length;
  std::string out(net::kFrameHeaderBytes, '\0');
  net::encodeHeader(h, reinterpret_cast<uint8_t*>(&out[0]));
  return out;
}

TEST(ControlFrames, WholeFramesInOrderAndAPartialOneWaits) {
  std::string third = controlFrame("third message");
  std::string buffer = controlFrame("one") + controlFrame("") + third.substr(0, 15);
  std::vector<ControlChannel::Message> out;
  EXPECT_EQ(takeControlMessages(3, buffer, out), "");
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].from, 3);
  EXPECT_EQ(out[0].bytes, "one");
  EXPECT_EQ(out[1].bytes, "");
  EXPECT_EQ(buffer, third.substr(0, 15));
  buffer += third.substr(15);
  EXPECT_EQ(takeControlMessages(3, buffer, out), "");
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].bytes, "third message");
  EXPECT_TRUE(buffer.empty());
}

TEST(ControlFrames, ABadHeaderIsRefusedBeforeItsPayload) {
  std::vector<ControlChannel::Message> out;
  // A length past the limit: refused from the header alone, frames before it delivered.
  std::string buffer =
      controlFrame("ok") + header(net::kControlMagic, 1, kMaxControlMessageBytes + 1);
  std::string bad = takeControlMessages(1, buffer, out);
  EXPECT_NE(bad.find("exceeds the limit"), std::string::npos) << bad;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].bytes, "ok");
  // Another protocol's frame, and a type this revision does not know.
  buffer = header(net::kStoreMagic, 1, 0);
  EXPECT_NE(takeControlMessages(1, buffer, out).find("bad frame magic"), std::string::npos);
  buffer = header(net::kControlMagic, 2, 0);
  EXPECT_EQ(takeControlMessages(1, buffer, out), "unknown frame type 2");
  EXPECT_EQ(out.size(), 1u);
}

TEST(ControlFrames, TheTreesReaderTakesRoutedAndSubtreeFramesWhole) {
  std::string routed = routedControlFrame(41, "up from 41");
  std::string buffer = controlFrame("direct") + routed + subtreeControlFrame("all");
  std::vector<ControlFrame> out;
  EXPECT_EQ(takeControlFrames(buffer, out), "");
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].type, ControlFrameType::Direct);
  EXPECT_EQ(out[0].message, "direct");
  EXPECT_EQ(out[1].type, ControlFrameType::Routed);
  EXPECT_EQ(out[1].rank, 41);
  EXPECT_EQ(out[1].message, "up from 41");
  EXPECT_EQ(out[1].wire, routed);  // a relay passes it on unchanged
  EXPECT_EQ(out[2].type, ControlFrameType::Subtree);
  EXPECT_EQ(out[2].message, "all");
  EXPECT_TRUE(buffer.empty());
  // A routed frame too short to hold its rank, and a type no revision knows.
  buffer = header(net::kControlMagic, 2, 3) + "abc";
  EXPECT_EQ(takeControlFrames(buffer, out), "routed frame too short");
  buffer = header(net::kControlMagic, 4, 0);
  EXPECT_EQ(takeControlFrames(buffer, out), "unknown frame type 4");
  // The shared-memory channel's reader still takes direct frames only.
  std::vector<ControlChannel::Message> messages;
  buffer = routed;
  EXPECT_EQ(takeControlMessages(1, buffer, messages), "unknown frame type 2");
}

}  // namespace
}  // namespace hora
