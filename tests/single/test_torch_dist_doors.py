"""``init_process_group(backend="hora")`` wherever the job was started: with no Hora import
(torch loads the backend at ``import torch``), with the rank and world size torch is given
(``mp.spawn`` with ``file://`` and ``tcp://`` rendezvous), again after ``destroy_process_group``,
two jobs at once on one host, and under horarun with torchrun's variables."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from torchrun_jobs import clean_env, free_port

HERE = Path(__file__).resolve().parent
SPAWN_JOB = str(HERE / "torch_spawn_job.py")


def run(argv: list[str], env: dict[str, str] | None = None, timeout: float = 180) -> str:
    proc = subprocess.run(argv, env=env or clean_env(), capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_import_torch_registers_hora_without_importing_hora() -> None:
    out = run([sys.executable, "-c",
               ("import sys, torch, torch.distributed as dist; "
               "print('HORA' in dist.Backend._plugins, "
               "any(m == 'hora' or m.startswith('hora.') for m in sys.modules))")])
    assert out.split() == ["True", "False"]


def test_a_broken_hora_package_does_not_break_import_torch(tmp_path: Path) -> None:
    """A ``hora`` package that fails to import, first on the path: ``import torch`` works, the
    backend is known, and only creating a ``hora`` group fails, with the import's error."""
    (tmp_path / "hora").mkdir()
    (tmp_path / "hora" / "__init__.py").write_text("raise ImportError('hora is broken here')\n")
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    code = ("import torch, torch.distributed as dist; print('known', 'HORA' in dist.Backend._plugins)\n"
            "try:\n"
            "    dist.init_process_group('hora', init_method='tcp://127.0.0.1:1', rank=0, "
            "world_size=1)\n"
            "except ImportError as exc:\n"
            "    print('group:', exc)\n")
    out = run([sys.executable, "-c", code], env)
    assert "known True" in out
    assert "group: hora is broken here" in out


def test_a_failing_registration_warns_instead_of_raising() -> None:
    code = ("import warnings, torch.distributed as dist, hora_torch_autoload\n"
            "dist.Backend._plugins.pop('HORA', None)\n"
            "def refuse(*a, **k): raise RuntimeError('torch changed')\n"
            "dist.Backend.register_backend = refuse\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n"
            "    hora_torch_autoload.register()\n"
            "print([str(w.message) for w in caught])\n")
    out = run([sys.executable, "-c", code])
    assert "could not register the 'hora' torch.distributed backend" in out
    assert "torch changed" in out


def lines_of(out: str) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for line in out.splitlines():
        match = re.match(r"rank (\d+): (.*)", line)
        if match:
            found.setdefault(int(match.group(1)), []).append(match.group(2))
    return found


def expected(rank: int, size: int) -> str:
    return (f"backend hora size {size} sum {size * (size + 1) // 2} from_left "
            f"{(rank - 1) % size} hora {rank}/{size} local {rank}/{size}")


def test_mp_spawn_with_file_rendezvous_twice_in_one_process(tmp_path: Path) -> None:
    out = run([sys.executable, SPAWN_JOB, "3", f"file://{tmp_path}/store1",
               f"file://{tmp_path}/store2"])
    assert lines_of(out) == {r: [expected(r, 3)] * 2 for r in range(3)}


def test_two_jobs_on_one_host_at_once_with_tcp_rendezvous() -> None:
    jobs = [subprocess.Popen([sys.executable, SPAWN_JOB, "2", f"tcp://127.0.0.1:{free_port()}"],
                             env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    for job in jobs:
        out, err = job.communicate(timeout=180)
        assert job.returncode == 0, out + err
        assert lines_of(out) == {r: [expected(r, 2)] for r in range(2)}


def test_hora_started_first_alone_is_refused_with_both_views(tmp_path: Path) -> None:
    env = clean_env()
    env["SPAWN_JOB_HORA_FIRST"] = "1"
    out = run([sys.executable, SPAWN_JOB, "2", f"file://{tmp_path}/store"], env)
    lines = lines_of(out)
    assert set(lines) == {0, 1}
    assert lines[1][0].startswith("refused: hora backend: torch.distributed says rank 1 of 2, "
                                  "but Hora is already running as rank 0 of 1")
    assert "call init_process_group before hvd.init()" in lines[1][0]


def test_import_hora_torch_registers_when_torch_does_not_autoload() -> None:
    env = clean_env()
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    out = run([sys.executable, "-c",
               ("import torch.distributed as dist; before = 'HORA' in dist.Backend._plugins; "
               "import hora.torch; print(before, 'HORA' in dist.Backend._plugins)")], env)
    assert out.split() == ["False", "True"]


def test_horarun_gives_each_rank_torchrun_s_variables() -> None:
    names = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
             "GROUP_WORLD_SIZE", "MASTER_ADDR"]
    code = ("import os; print('vars', " +
            ", ".join(f"os.environ['{n}']" for n in names) + ", int(os.environ['MASTER_PORT']) > 0)")
    out = run([sys.executable, "-m", "hora.runner", "-np", "3", sys.executable, "-c", code])
    seen = sorted(line.split("vars ", 1)[1] for line in out.splitlines() if "vars " in line)
    assert seen == [f"{r} 3 {r} 3 0 1 127.0.0.1 True" for r in range(3)]


def test_a_gloo_script_reading_torchrun_s_variables_distributes_under_horarun() -> None:
    code = ("import torch, torch.distributed as dist; dist.init_process_group('gloo'); "
            "t = torch.ones(1); dist.all_reduce(t); print('sum', t.item(), dist.get_rank()); "
            "dist.destroy_process_group()")
    out = run([sys.executable, "-m", "hora.runner", "-np", "2", sys.executable, "-c", code])
    assert sorted(line.split("sum ", 1)[1] for line in out.splitlines() if "sum " in line) == [
        "2.0 0", "2.0 1"]


@pytest.mark.parametrize("np_", [2])
def test_hora_backend_under_horarun_uses_horarun_s_world(np_: int) -> None:
    code = ("import torch, torch.distributed as dist, hora; dist.init_process_group('hora'); "
            "t = torch.ones(1); dist.all_reduce(t); "
            "print('hora', t.item(), hora.rank(), hora.size(), bool(hora.common.basics.listen_host()))")
    out = run([sys.executable, "-m", "hora.runner", "-np", str(np_), sys.executable, "-c", code])
    assert sorted(line.split("hora ", 1)[1] for line in out.splitlines() if "hora " in line) == [
        f"{float(np_)} {r} {np_} True" for r in range(np_)]
