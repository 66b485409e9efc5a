#pragma once
// The part of the emulated CUDA runtime that the emulated NCCL builds on: streams are ordered
// task queues, each run by its own worker thread; events complete when their stream reaches them.
#include <functional>

namespace hora_emu {

struct Stream;

// Appends a task to the stream (nullptr: the legacy default stream). Tasks of one stream run one
// after another on its worker thread, in the order they were appended.
void enqueueTask(Stream* stream, std::function<void()> task);

// Set while the process exits: blocked tasks give up instead of waiting forever.
bool shuttingDown();

}  // namespace hora_emu
