// ControlSender: every control message counted, heartbeats answered, and a worker whose send to a
// closed coordinator fails applies what already arrived before it gives up.
#include "core/runtime/control_sender.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/common/errors.h"
#include "core/coordinator/codec.h"
#include "tests/cpp/runtime_parts_fakes.h"

namespace hora {
namespace {

struct Applied {
  std::vector<ResponseBatch> batches;
  bool stopOnShutdown = true;
  ControlSender::ApplyArrived fn() {
    return [this](const ResponseBatch& b) {
      batches.push_back(b);
      return stopOnShutdown && b.shutdown;
    };
  }
};

TEST(ControlSender, CountsEveryMessageItSends) {
  RecordingChannel channel(0, 4);
  Applied applied;
  ControlSender sender(channel, applied.fn());
  sender.send(2, "x");
  sender.toWorkers("y");
  EXPECT_EQ(sender.sent(), 4u);
  ASSERT_EQ(channel.sent.size(), 4u);
  EXPECT_EQ(channel.sent[1].first, 1);
  EXPECT_EQ(channel.sent[3].first, 3);
}

TEST(ControlSender, ToWorkersSkipsAGoneRankOnlyWhenBestEffort) {
  RecordingChannel channel(0, 4);
  channel.failSendsTo = 2;
  Applied applied;
  ControlSender sender(channel, applied.fn());
  EXPECT_NO_THROW(sender.toWorkers("bye", /*bestEffort=*/true));
  EXPECT_EQ(channel.sent.size(), 2u);  // ranks 1 and 3
  EXPECT_THROW(sender.toWorkers("data"), IoError);
}

TEST(ControlSender, RankZeroAnswersAPingWithAPong) {
  RecordingChannel channel(0, 3);
  Applied applied;
  ControlSender sender(channel, applied.fn());
  EXPECT_FALSE(sender.answerHeartbeat(2, Heartbeat::None, 0));
  EXPECT_TRUE(sender.answerHeartbeat(2, Heartbeat::Pong, 0));
  EXPECT_TRUE(channel.sent.empty());
  EXPECT_TRUE(sender.answerHeartbeat(2, Heartbeat::Ping, 0));
  ASSERT_EQ(channel.sent.size(), 1u);
  EXPECT_EQ(channel.sent[0].first, 2);
  EXPECT_EQ(decodeResponseBatch(channel.sent[0].second).heartbeat, Heartbeat::Pong);
}

TEST(ControlSender, AWorkersHeartbeatCarriesItsAppliedBatches) {
  RecordingChannel channel(1, 3);
  Applied applied;
  ControlSender sender(channel, applied.fn());
  sender.answerHeartbeat(0, Heartbeat::Ping, 7);
  ASSERT_EQ(channel.sent.size(), 1u);
  EXPECT_EQ(channel.sent[0].first, 0);
  RequestBatch b = decodeRequestBatch(channel.sent[0].second);
  EXPECT_EQ(b.heartbeat, Heartbeat::Pong);
  EXPECT_EQ(b.appliedBatches, 7u);
}

TEST(ControlSender, AFailedSendAfterTheCoordinatorsShutdownIsNoFailure) {
  RecordingChannel channel(1, 2);
  channel.failSendsTo = 0;
  ResponseBatch ping;
  ping.heartbeat = Heartbeat::Ping;
  ResponseBatch bye;
  bye.shutdown = true;
  channel.arriving.push_back({0, encodeResponseBatch(ping)});
  channel.arriving.push_back({0, encodeResponseBatch(bye)});
  Applied applied;
  ControlSender sender(channel, applied.fn());
  EXPECT_NO_THROW(sender.toCoordinator(RequestBatch{}));
  ASSERT_EQ(applied.batches.size(), 1u);  // the heartbeat is not applied
  EXPECT_TRUE(applied.batches[0].shutdown);
}

TEST(ControlSender, AFailedSendThatStoppedNothingRethrows) {
  RecordingChannel channel(1, 2);
  channel.failSendsTo = 0;
  channel.arriving.push_back({0, encodeResponseBatch(ResponseBatch{})});
  Applied applied;
  ControlSender sender(channel, applied.fn());
  EXPECT_THROW(sender.toCoordinator(RequestBatch{}), IoError);
  EXPECT_EQ(applied.batches.size(), 1u);
  // Nothing arrived at all: the poll's own error.
  EXPECT_THROW(sender.toCoordinator(RequestBatch{}), IoError);
  EXPECT_EQ(sender.sent(), 0u);
}

}  // namespace
}  // namespace hora
