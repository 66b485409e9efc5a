#include "core/ops/op_context.h"

#include <cctype>

namespace hora {

ActivityScope::ActivityScope(OpContext& cx, const Response& r, const char* activity)
    : timeline_(cx.timeline != nullptr && cx.timeline->enabled() ? cx.timeline : nullptr), r_(r) {
  if (timeline_ != nullptr) start(activity);
}

ActivityScope::ActivityScope(OpContext& cx, const Response& r, TransportActivity collective)
    : timeline_(cx.timeline != nullptr && cx.timeline->enabled() ? cx.timeline : nullptr), r_(r) {
  if (timeline_ != nullptr) start(collectiveActivity(cx, collective.op));
}

void ActivityScope::start(const std::string& activity) {
  for (const auto& name : r_.names) timeline_->activityStart(r_.processSetId, name, activity);
}

ActivityScope::~ActivityScope() {
  if (timeline_ == nullptr) return;
  for (const auto& name : r_.names) timeline_->activityEnd(r_.processSetId, name);
}

std::string collectiveActivity(const OpContext& cx, const char* op) {
  std::string name = cx.comm.backendName();
  for (auto& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name + "_" + op;
}

}  // namespace hora
