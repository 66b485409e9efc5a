"""Training clients that start and wire up torch.distributed themselves, over ``hora`` and over
``gloo``: Lightning, Ray Train, Accelerate, DeepSpeed ZeRO and the Hugging Face Trainer.

Each test trains the same tiny model on 2 CPU ranks over each backend (over gloo once per script
and arguments, whichever launcher started it), and checks what the client says (2 processes),
what torch says inside the training (the backend asked for), that both ranks end with identical
parameters (their gradients were really shared) which moved from where they started, and that
hora's parameters are gloo's. Run with the Python of the clients'
environment (requirements.txt) from the repository root::

    python -m pytest tests/clients
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch
from client_jobs import HERE, command, read_results, run_job
from training_task import build_model

BACKENDS = ("gloo", "hora")
JOB_TIMEOUT = 240
RAY_TIMEOUT = 300
# Both backends sum the same two values per element, so the parameters agree to the last bit;
# the tolerance only leaves room for a reduction order that differs.
ATOL, RTOL = 1e-6, 1e-5


# gloo's results by (script, arguments): the reference does not depend on the launcher (the same
# seed, model and shards on 2 ranks), so a script tested under several launchers trains over
# gloo once per session.
_GLOO_RESULTS: dict[tuple[str, tuple[str, ...]], dict[int, dict]] = {}


def train_over_each_backend(tmp_path: Path, launcher: str, script: str,
                            args: tuple[str, ...] = ()) -> dict[str, dict[int, dict]]:
    """Run ``script`` under ``launcher`` over hora, and over gloo unless an earlier test ran it
    over gloo; every rank's result, by backend."""
    results = {}
    for backend in BACKENDS:
        if backend == "gloo" and (script, args) in _GLOO_RESULTS:
            results[backend] = _GLOO_RESULTS[(script, args)]
            continue
        out = tmp_path / backend
        argv, env = command(launcher, script, ["--backend", backend, "--out", str(out), *args])
        run_job(argv, env, JOB_TIMEOUT)
        results[backend] = read_results(out)
    _GLOO_RESULTS[(script, args)] = results["gloo"]
    return results


def assert_hora_trains_as_gloo(results: dict[str, dict[int, dict]],
                               client_reports_backend: bool = False) -> None:
    """The checks every client passes; ``client_reports_backend``: its own API names the
    backend too, and must name the one asked for."""
    start = torch.cat([p.detach().reshape(-1) for p in build_model("tiny").parameters()])
    final = {}
    for backend, ranks in results.items():
        for rank, result in sorted(ranks.items()):
            where = f"{backend}, rank {rank}"
            assert result["world_size"] == 2, f"{where}: the client ran {result['world_size']}"
            assert result["backend"] == backend, f"{where}: torch says {result['backend']}"
            if client_reports_backend:
                assert result["client_backend"] == backend, (
                    f"{where}: the client says {result['client_backend']}")
        params = [torch.tensor(ranks[r]["params"]) for r in sorted(ranks)]
        assert torch.equal(params[0], params[1]), f"{backend}: the ranks' parameters differ"
        assert not torch.allclose(params[0], start), f"{backend}: training left the model as is"
        final[backend] = params[0]
    difference = (final["hora"] - final["gloo"]).abs().max().item()
    assert torch.allclose(final["hora"], final["gloo"], atol=ATOL, rtol=RTOL), (
        f"hora's parameters are not gloo's (largest difference {difference})")


def pinned_versions() -> dict[str, str]:
    """requirements.txt and constraints.txt as {distribution name: version}."""
    pins = {}
    for pinned in ("requirements.txt", "constraints.txt"):
        for line in (HERE / pinned).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                name, version = line.split("==")
                pins[name.split("[")[0]] = version
    return pins


def test_the_installed_clients_and_torch_are_the_pinned_versions() -> None:
    wrong = {}
    for name, pinned in pinned_versions().items():
        installed = metadata.version(name)
        if installed.split("+")[0] != pinned:  # torch 2.13.0+cpu is torch 2.13.0
            wrong[name] = f"{installed} installed, {pinned} pinned"
    assert not wrong, f"{sys.executable}: {wrong}"


@pytest.mark.parametrize("launcher", ["own", "torchrun", "horarun"])
def test_lightning_ddp_trains_over_hora_as_over_gloo_when_started_by(
        tmp_path: Path, launcher: str) -> None:
    assert_hora_trains_as_gloo(train_over_each_backend(tmp_path, launcher, "lightning_train.py"))


def test_ray_train_trains_over_hora_as_over_gloo_in_one_local_ray(tmp_path: Path) -> None:
    argv, env = command("own", "ray_train.py",
                        ["--backend", ",".join(BACKENDS), "--out", str(tmp_path)])
    run_job(argv, env, RAY_TIMEOUT)
    assert_hora_trains_as_gloo({backend: read_results(tmp_path / backend)
                                for backend in BACKENDS})


@pytest.mark.parametrize("launcher", ["torchrun", "horarun"])
def test_accelerate_trains_over_hora_as_over_gloo_and_says_which_when_started_by(
        tmp_path: Path, launcher: str) -> None:
    results = train_over_each_backend(tmp_path, launcher, "accelerate_train.py")
    assert_hora_trains_as_gloo(results, client_reports_backend=True)


@pytest.mark.parametrize("stage", [1, 2])
def test_deepspeed_zero_trains_over_hora_as_over_gloo_at_stage(tmp_path: Path, stage: int
                                                               ) -> None:
    results = train_over_each_backend(tmp_path, "torchrun", "deepspeed_train.py",
                                      ("--stage", str(stage)))
    assert_hora_trains_as_gloo(results)


def test_the_hugging_face_trainer_trains_over_hora_as_over_gloo_and_says_which(
        tmp_path: Path) -> None:
    results = train_over_each_backend(tmp_path, "torchrun", "hf_trainer_train.py")
    assert_hora_trains_as_gloo(results, client_reports_backend=True)


def test_accelerate_itself_refuses_hora_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why hora.torch.accelerate.state() exists: asked directly, Accelerate refuses the name
    before it creates any group."""
    from accelerate import PartialState

    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match="Your assigned backend hora is not available"):
        PartialState(cpu=True, backend="hora")
