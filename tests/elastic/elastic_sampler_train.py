"""An elastic torch job whose batches come from an ``ElasticSampler`` (started by horarun).

Each step every worker takes its next batch of sample indices from the sampler, and the job
allgathers them into ``state.seen`` (one list per epoch), which is committed and rolled back with
the rest of the state. So ``state.seen`` is the job's committed history of processed samples:
after a worker dies mid-epoch, the re-formed job must go on with exactly the samples not yet
processed, none skipped and none done twice (beyond the sampler's wrap-around padding of an
uneven split). Environment:

- ``SAMPLER_KILL``: ``worker:epoch:batch``; that worker SIGKILLs itself before that batch.
- ``ELASTIC_OUT``: directory for ``pid.<worker>``, ``progress`` and ``final.<worker>.json``.
"""

from __future__ import annotations

import json
import os
import signal
import time

import hora.torch as hvd
import torch
from elastic_train import OUT, WORKER, note, write_pid

SAMPLES = 90
BATCH = 3  # per worker
EPOCHS = 2
COMMIT_EVERY = 2


def main() -> None:
    write_pid()
    kill_worker, kill_epoch, kill_batch = os.environ.get("SAMPLER_KILL", "-:-1:-1").split(":")
    dataset = torch.utils.data.TensorDataset(torch.arange(SAMPLES))
    hvd.init()
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=5)
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, sampler=sampler)
    state = hvd.elastic.TorchState(sampler=sampler, epoch=0, seen=[[] for _ in range(EPOCHS)])

    @hvd.elastic.run
    def train(state: hvd.elastic.TorchState) -> None:
        while state.epoch < EPOCHS:
            for batch_idx, (indices,) in enumerate(loader):
                if (WORKER, state.epoch, batch_idx) == (kill_worker, int(kill_epoch),
                                                        int(kill_batch)):
                    os.kill(os.getpid(), signal.SIGKILL)
                gathered = hvd.allgather_object(indices.tolist(), name="sampler.seen")
                state.seen[state.epoch] += [i for part in gathered for i in part]
                state.sampler.record_batch(batch_idx, BATCH)
                time.sleep(0.02)
                note(f"worker {WORKER} size {hvd.size()} epoch {state.epoch} batch {batch_idx}")
                if batch_idx % COMMIT_EVERY == COMMIT_EVERY - 1:
                    state.commit()
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()

    train(state)
    result = {"worker": WORKER, "rank": hvd.rank(), "size": hvd.size(), "seen": state.seen,
              "samples": SAMPLES}
    with open(os.path.join(OUT, f"final.{WORKER}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
