"""The Kubernetes manifests of examples/kubernetes/ (docs/launching/kubernetes.md) are valid, and
the plain Job's recipe forms a Hora job.

- Every document of every YAML file there validates strictly (an unknown field fails) against the
  Kubernetes schemas that ``kubernetes-validate`` ships, for ``K8S_VERSION``. The MPIJob, a custom
  resource that package does not know, has its pod templates validated as core ``PodTemplate``s
  and its own fields against ``MPIJOB_SCHEMA``, written from the MPI Operator's v2beta1 API.
- The Indexed Job's parts agree: the Service, the pods' subdomain, ``MASTER_ADDR``, the secret's
  mount and ``HORA_SECRET_FILE``, the size in ``completions``, ``parallelism`` and ``WORLD_SIZE``.
- Each pod's environment is built from the Job's container ``env`` as Kubernetes builds it (the
  completion index through the downward API, ``$(VAR)`` references to earlier variables), with
  three local stand-ins: ``MASTER_ADDR`` is 127.0.0.1 (no cluster DNS here), ``MASTER_PORT`` a
  free port, the Secret a file in a temporary directory. N local processes started with those
  environments must agree on their places and on an allreduce.

Needs ``pip install kubernetes-validate==1.37.0`` (which brings jsonschema) for the schema tests.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

try:
    import jsonschema
    import kubernetes_validate
except ImportError:  # the schema tests fail saying what to install; the run test needs neither
    jsonschema = kubernetes_validate = None

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "examples" / "kubernetes"
K8S_VERSION = "1.37.0"  # the newest schemas kubernetes-validate 1.37.0 ships
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
RUN_SECONDS = 60.0  # one local job, start to finish

_REPLICA: dict[str, Any] = {
    "type": "object",
    "required": ["replicas", "restartPolicy", "template"],
    "additionalProperties": False,
    "properties": {
        "replicas": {"type": "integer", "minimum": 1},
        "restartPolicy": {"enum": ["Never", "OnFailure"]},
        "template": {"type": "object"},  # a core PodTemplateSpec, validated as such
    },
}

# From the MPI Operator's v2beta1 types (pkg/apis/kubeflow/v2beta1/types.go) and the checks its
# controller applies (pkg/apis/kubeflow/validation): one launcher, restart policies Never or
# OnFailure, the clean-pod policies, the MPI implementations. Stricter in one point: the operator
# accepts an MPIJob without workers, a Hora job needs them.
MPIJOB_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "kubeflow.org/v2beta1"},
        "kind": {"const": "MPIJob"},
        "metadata": {"type": "object"},  # ObjectMeta, validated with the pod templates
        "spec": {
            "type": "object",
            "required": ["mpiReplicaSpecs"],
            "additionalProperties": False,
            "properties": {
                "slotsPerWorker": {"type": "integer", "minimum": 0},
                "runLauncherAsWorker": {"type": "boolean"},
                "sshAuthMountPath": {"type": "string"},
                "launcherCreationPolicy": {"enum": ["AtStartup", "WaitForWorkersReady"]},
                "mpiImplementation": {"enum": ["OpenMPI", "Intel", "MPICH"]},
                "runPolicy": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "cleanPodPolicy": {"enum": ["None", "Running", "All"]},
                        "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
                        "activeDeadlineSeconds": {"type": "integer", "minimum": 0},
                        "backoffLimit": {"type": "integer", "minimum": 0},
                        "suspend": {"type": "boolean"},
                        "managedBy": {"type": "string"},
                        "schedulingPolicy": {"type": "object"},
                    },
                },
                "mpiReplicaSpecs": {
                    "type": "object",
                    "required": ["Launcher", "Worker"],
                    "additionalProperties": False,
                    "properties": {
                        "Launcher": {**_REPLICA, "properties": {
                            **_REPLICA["properties"], "replicas": {"const": 1}}},
                        "Worker": _REPLICA,
                    },
                },
            },
        },
    },
}

# Every document of every manifest: (file name, document).
DOCUMENTS = [(path.name, doc) for path in sorted(MANIFESTS.glob("*.yaml"))
             for doc in yaml.safe_load_all(path.read_text()) if doc]


def _one(kind: str) -> dict[str, Any]:
    """The one document of this kind among the manifests."""
    found = [doc for _, doc in DOCUMENTS if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind} in {MANIFESTS}, found {len(found)}"
    return found[0]


def _validate(doc: dict[str, Any]) -> None:
    if kubernetes_validate is None:
        pytest.fail("these tests need kubernetes-validate: pip install kubernetes-validate==1.37.0")
    validated = kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert K8S_VERSION.startswith(validated + "."), f"validated against {validated}"


def _validate_mpijob(job: dict[str, Any]) -> None:
    if jsonschema is None:
        pytest.fail("these tests need kubernetes-validate: pip install kubernetes-validate==1.37.0")
    jsonschema.validate(job, MPIJOB_SCHEMA)
    for replica in job["spec"]["mpiReplicaSpecs"].values():
        _validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": job["metadata"],
                   "template": replica["template"]})


@pytest.mark.parametrize("name,doc", DOCUMENTS,
                         ids=[f"{name}:{doc['kind']}" for name, doc in DOCUMENTS])
def test_every_manifest_validates_strictly(name: str, doc: dict[str, Any]) -> None:
    if doc["kind"] == "MPIJob":
        _validate_mpijob(doc)
    else:
        _validate(doc)


def test_manifests_hold_the_job_and_the_mpijob() -> None:
    assert {doc["kind"] for _, doc in DOCUMENTS} >= {"Service", "Job", "MPIJob"}


def _env_list(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The container's ``env`` entries by name."""
    return {var["name"]: var for var in container.get("env", [])}


def test_job_recipe_parts_agree() -> None:
    service, job = _one("Service"), _one("Job")
    name, spec, pod = job["metadata"]["name"], job["spec"], job["spec"]["template"]["spec"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"job-name": name}
    assert spec["completionMode"] == "Indexed" and pod["subdomain"] == service["metadata"]["name"]
    (train,) = pod["containers"]
    env = _env_list(train)
    assert spec["completions"] == spec["parallelism"] == int(env["WORLD_SIZE"]["value"])
    rank0 = f"{name}-0.{service['metadata']['name']}"
    for container in pod["containers"] + pod.get("initContainers", []):
        assert _env_list(container)["MASTER_ADDR"]["value"] == rank0, container["name"]
    secret_file = Path(env["HORA_SECRET_FILE"]["value"])
    mounts = [m for m in train["volumeMounts"] if secret_file.parent == Path(m["mountPath"])]
    assert len(mounts) == 1, f"HORA_SECRET_FILE={secret_file}: no volume is mounted there"
    (volume,) = [v for v in pod["volumes"] if v["name"] == mounts[0]["name"]]
    assert secret_file.name in [item["path"] for item in volume["secret"]["items"]]


def test_mpijob_starts_one_rank_per_slot() -> None:
    job = _one("MPIJob")
    (launcher,) = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"]
    argv = launcher.get("command", []) + launcher.get("args", [])
    assert argv[0] == "mpirun"
    slots = job["spec"]["slotsPerWorker"] * job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    assert int(argv[argv.index("-np") + 1]) == slots


_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def _expand(text: str, defined: dict[str, str]) -> str:
    """Kubernetes' expansion of an env value: $(NAME) of an earlier variable, $$ for $; a
    reference to anything else stays as written."""
    return _REF.sub(lambda m: "$" if m.group(0) == "$$" else defined.get(m.group(1), m.group(0)),
                    text)


def _pod_env(container: dict[str, Any], index: int) -> dict[str, str]:
    """The variables Kubernetes gives ``container`` in the pod of completion index ``index``."""
    annotations = {INDEX_ANNOTATION: str(index)}
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "valueFrom" in var:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            match = re.fullmatch(r"metadata\.annotations\['([^']+)'\]", path)
            assert match, f"{var['name']}: the test knows no field {path}"
            env[var["name"]] = annotations[match.group(1)]
        else:
            env[var["name"]] = _expand(var.get("value", ""), env)
    # The Job controller appends this one after the container's own variables.
    env.setdefault("JOB_COMPLETION_INDEX", str(index))
    return env


def _free_port() -> int:
    """A loopback port free with its successor (rank 0's store takes MASTER_PORT + 1)."""
    for _ in range(50):
        with socket.socket() as a, socket.socket() as b:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            try:
                b.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise RuntimeError("no pair of free ports")


def _mount_secrets(pod: dict[str, Any], container: dict[str, Any], tmp: Path) -> dict[str, str]:
    """Write every Secret volume ``container`` mounts under ``tmp``, each key a random value;
    returns {mountPath: local directory}."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts: dict[str, str] = {}
    for mount in container.get("volumeMounts", []):
        secret = volumes[mount["name"]].get("secret")
        if secret is None:
            continue
        where = tmp / mount["name"]
        where.mkdir()
        for item in secret["items"]:
            (where / item["path"]).write_text(secrets.token_hex(32))
        mounts[mount["mountPath"]] = str(where)
    return mounts


CHECK = """
import numpy as np
import hora
hora.init()
total = hora.allreduce(np.array([hora.rank() + 1.0]), op=hora.Sum, name="kubernetes_check")
print("PLACE", hora.rank(), hora.size(), hora.local_rank(), hora.local_size(), hora.cross_rank(),
      hora.cross_size(), float(total[0]), flush=True)
"""


def _base_env() -> dict[str, str]:
    """This process's environment without any launcher's variables (a pod has none)."""
    drop = ("HORA_", "HOROVOD_", "OMPI_", "PMI_", "SLURM_", "_HOROVOD_")
    names = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
             "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"}
    return {k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in names}


def _run_pods(envs: list[dict[str, str]]) -> list[str]:
    """Start one process per pod environment; their outputs, every wait bounded."""
    procs = [subprocess.Popen([sys.executable, "-c", CHECK], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for env in envs]
    deadline = time.monotonic() + RUN_SECONDS
    outputs = []
    try:
        for i, proc in enumerate(procs):
            try:
                out, _ = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"pod {i} did not finish within {RUN_SECONDS} s")
            assert proc.returncode == 0, f"pod {i} failed:\n{out}"
            outputs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    return outputs


@pytest.mark.parametrize("size", [2, 3])
def test_job_env_recipe_forms_a_hora_job(size: int, tmp_path: Path) -> None:
    pod = _one("Job")["spec"]["template"]["spec"]
    (train,) = pod["containers"]
    # Resized as the page says (completions, parallelism and WORLD_SIZE together).
    train = {**train, "env": [{**var, "value": str(size)} if var["name"] == "WORLD_SIZE" else var
                              for var in train.get("env", [])]}
    mounts = _mount_secrets(pod, train, tmp_path)
    port = str(_free_port())
    envs = []
    for index in range(size):
        env = _pod_env(train, index)
        # The local stand-ins: no cluster DNS, a free port, the Secret in tmp_path; and a start
        # timeout that fits the test, since the processes start together.
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, HORA_START_TIMEOUT="20")
        for name, value in env.items():
            for mount_path, local in mounts.items():
                if value.startswith(mount_path + "/"):
                    env[name] = local + value[len(mount_path):]
        envs.append({**_base_env(), **env})
    secret_file = envs[0].get("HORA_SECRET_FILE", "")
    assert os.path.isfile(secret_file), f"HORA_SECRET_FILE={secret_file!r}: no mounted Secret"

    places = []
    for out in _run_pods(envs):
        lines = [line.split()[1:] for line in out.splitlines() if line.startswith("PLACE ")]
        assert len(lines) == 1, out
        places.append(tuple(float(x) for x in lines[0]))
    expected_sum = size * (size + 1) / 2
    assert sorted(places) == [(r, size, 0, 1, r, size, expected_sum) for r in range(size)], (
        f"per pod: rank, size, local rank, local size, cross rank, cross size, sum: {places}")
