"""``hora.spark.torch.TorchEstimator`` on a local Spark session (conftest.py): the trained
parameters at 2 and 3 ranks against one process training on the same rows, sample weights,
validation, resuming from a run's checkpoint, ``transform``, a custom backend, and bad input.

Every rank takes one batch per epoch holding all of its rows (``batch_size`` = rows / ranks),
so the averaged gradient is the gradient over the whole dataset whatever order Spark wrote the
rows in, and the reference is plain full-batch gradient descent (at the learning rate times the
number of ranks, as Horovod's estimators scale it).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO
from hora.spark.common.backend import Backend
from hora.spark.common.store import LocalStore, Store
from hora.spark.torch import TorchEstimator, TorchModel
from pyspark import cloudpickle
from pyspark.ml.feature import VectorAssembler
from torch import nn
from torch.nn import functional as F

cloudpickle.register_pickle_by_value(sys.modules[__name__])

LR = 0.1


class Regressor(nn.Module):
    """A small two-layer network, enough for the gradients to depend on every row."""

    def __init__(self, inputs: int = 3, outputs: int = 1) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.hidden = nn.Linear(inputs, 4)
        self.out = nn.Linear(4, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.hidden(x)))


def dataset(rows: int, seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 3)).astype(np.float32)
    y = (x @ np.array([1.5, -2.0, 0.5], np.float32) + 0.25).astype(np.float32)
    return {"x": x, "y": y, "weight": rng.uniform(0.5, 2.0, rows).astype(np.float32),
            "val": (np.arange(rows) % 4 == 0)}


def dataframe(spark, arrays: dict[str, np.ndarray]):
    rows = [(*map(float, x), float(y), float(w), bool(v))
            for x, y, w, v in zip(arrays["x"], arrays["y"], arrays["weight"], arrays["val"])]
    df = spark.createDataFrame(rows, "x0 double, x1 double, x2 double, y float, weight float, "
                                     "val boolean")
    return VectorAssembler(inputCols=["x0", "x1", "x2"], outputCol="features").transform(df)


def reference(model: nn.Module, arrays: dict[str, np.ndarray], epochs: int, lr: float,
              weighted: bool = False) -> dict[str, torch.Tensor]:
    """Full-batch gradient descent in this process."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = torch.from_numpy(arrays["x"]), torch.from_numpy(arrays["y"]).reshape(-1, 1)
    for _ in range(epochs):
        optimizer.zero_grad()
        if weighted:
            w = torch.from_numpy(arrays["weight"])
            loss = (F.mse_loss(model(x), y, reduction="none").flatten() * w).mean()
        else:
            loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    return model.state_dict()


def assert_same_parameters(trained: nn.Module, expected: dict[str, torch.Tensor]) -> None:
    for name, value in trained.state_dict().items():
        np.testing.assert_allclose(value.numpy(), expected[name].numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)


def estimator(store: Store, model: nn.Module, rows: int, num_proc: int, **params) -> TorchEstimator:
    settings = {"num_proc": num_proc, "store": store, "model": model,
                "optimizer": torch.optim.SGD(model.parameters(), lr=LR), "loss": F.mse_loss,
                "feature_cols": ["features"], "input_shapes": [[3]], "label_cols": ["y"],
                "batch_size": rows // num_proc, "epochs": 4, "shuffle": False, "verbose": 0}
    return TorchEstimator(**{**settings, **params})


@pytest.mark.parametrize("num_proc", [2, 3])
def test_ranks_train_to_the_parameters_of_one_process_on_all_rows(spark, tmp_path, num_proc):
    arrays = dataset(48)
    model = Regressor()
    trained = estimator(LocalStore(str(tmp_path)), model, 48, num_proc).fit(dataframe(spark, arrays))
    assert_same_parameters(trained.getModel(), reference(model, arrays, 4, LR * num_proc))
    assert [record["epoch"] for record in trained.getHistory()] == [0, 1, 2, 3]
    losses = [record["train"]["loss"] for record in trained.getHistory()]
    assert losses == sorted(losses, reverse=True), losses


def test_each_sample_loss_is_scaled_by_its_weight(spark, tmp_path):
    arrays = dataset(48)
    model = Regressor()
    trained = estimator(LocalStore(str(tmp_path)), model, 48, 2,
                        sample_weight_col="weight").fit(dataframe(spark, arrays))
    assert_same_parameters(trained.getModel(), reference(model, arrays, 4, LR * 2, weighted=True))


def test_a_validation_column_is_held_out_and_measured(spark, tmp_path):
    arrays = dataset(48)
    model = Regressor()
    train = {key: value[~arrays["val"]] for key, value in arrays.items()}
    trained = estimator(LocalStore(str(tmp_path)), model, len(train["y"]), 2,
                        validation="val").fit(dataframe(spark, arrays))
    # Only the training rows moved the parameters.
    assert_same_parameters(trained.getModel(), reference(model, train, 4, LR * 2))
    for record in trained.getHistory():
        assert set(record) == {"epoch", "train", "validation"}
        assert record["validation"]["loss"] > 0


def test_a_validation_fraction_is_held_out(spark, tmp_path):
    trained = estimator(LocalStore(str(tmp_path)), Regressor(), 48, 2, batch_size=8,
                        validation=0.25, random_seed=5, metrics=[F.l1_loss]
                        ).fit(dataframe(spark, dataset(48)))
    last = trained.getHistory()[-1]
    assert set(last["validation"]) == {"loss", "l1_loss"}
    assert last["train"]["l1_loss"] > 0


def test_a_fit_with_a_run_id_that_has_a_checkpoint_starts_from_it(spark, tmp_path):
    arrays = dataset(48)
    model = Regressor()
    store = LocalStore(str(tmp_path))
    df = dataframe(spark, arrays)
    first = estimator(store, model, 48, 2, epochs=3, run_id="resumed").fit(df)
    assert store.exists(store.get_checkpoint_path("resumed"))
    assert_same_parameters(first.getModel(), reference(model, arrays, 3, LR * 2))
    second = estimator(store, model, 48, 2, epochs=2, run_id="resumed").fit(df)
    assert_same_parameters(second.getModel(), reference(model, arrays, 5, LR * 2))
    # The optimizer comes back with the learning rate it was given, not the scaled one.
    assert second.getOptimizer().param_groups[0]["lr"] == pytest.approx(LR)


def test_only_the_runs_stay_in_the_store(spark, tmp_path):
    estimator(LocalStore(str(tmp_path)), Regressor(), 48, 2, run_id="r1",
              validation="val").fit(dataframe(spark, dataset(48)))
    assert sorted(os.listdir(tmp_path)) == ["runs"]
    assert sorted(os.listdir(tmp_path / "runs" / "r1")) == ["checkpoint"]


def test_a_store_at_a_file_url(spark, tmp_path):
    store = Store.create(f"file://{tmp_path}/url-store")
    trained = estimator(store, Regressor(), 48, 2, run_id="u").fit(dataframe(spark, dataset(48)))
    assert Path(tmp_path, "url-store", "runs", "u", "checkpoint").is_file()
    assert len(trained.getHistory()) == 4


def test_transform_appends_the_model_predictions(spark, tmp_path):
    arrays = dataset(12)
    df = dataframe(spark, arrays)
    trained = estimator(LocalStore(str(tmp_path)), Regressor(), 12, 2).fit(df)
    out = trained.transform(df)
    assert out.columns == df.columns + ["y__output"]
    assert type(out.schema["y__output"].dataType).__name__ == "FloatType"
    rows = out.orderBy("x0").collect()
    x = torch.tensor([[r.x0, r.x1, r.x2] for r in rows], dtype=torch.float32)
    expected = trained.getModel()(x).detach().numpy().reshape(-1)
    np.testing.assert_allclose([r.y__output for r in rows], expected, rtol=1e-6)


def test_a_model_with_several_outputs_per_row_predicts_vectors(spark):
    df = dataframe(spark, dataset(6))
    model = TorchModel(model=Regressor(outputs=2), feature_columns=["features"],
                       label_columns=["y"], input_shapes=[[3]], output_cols=["scores"])
    out = model.transform(df)
    assert type(out.schema["scores"].dataType).__name__ == "VectorUDT"
    first = out.first()
    expected = Regressor(outputs=2)(torch.tensor([[first.x0, first.x1, first.x2]],
                                                 dtype=torch.float32))
    np.testing.assert_allclose(first.scores.toArray(), expected.detach().numpy()[0], rtol=1e-6)


class RecordingBackend(Backend):
    """Runs the training function in this process, as one rank, and remembers the call."""

    def __init__(self) -> None:
        self.calls = 0

    def run(self, fn, args=(), kwargs=None, env=None):
        self.calls += 1
        return [fn(*args, **(kwargs or {}))]

    def num_processes(self) -> int:
        return 1


def test_a_given_backend_runs_the_ranks(spark, tmp_path):
    arrays = dataset(16)
    model = Regressor()
    backend = RecordingBackend()
    est = estimator(LocalStore(str(tmp_path)), model, 16, 1).setNumProc(None).setBackend(backend)
    trained = est.fit(dataframe(spark, arrays))
    assert backend.calls == 1
    assert_same_parameters(trained.getModel(), reference(model, arrays, 4, LR))


@pytest.mark.parametrize(("change", "message"), [
    ({"loss": None}, "loss parameter is required"),
    ({"optimizer": None}, "optimizer parameter is required"),
    ({"feature_cols": None}, "feature_cols parameter is required"),
    ({"store": None}, "store parameter is required"),
    ({"backend": RecordingBackend()}, "at most one of backend and num_proc"),
    ({"batch_size": 0}, "batch_size must be a positive integer"),
    ({"input_shapes": [[3], [3]]}, "2 input_shapes for 1 feature_cols"),
    ({"feature_cols": ["nope"]}, "column 'nope' is not in the DataFrame"),
    ({"validation": 1.5}, "validation must be a fraction"),
])
def test_bad_parameters_are_refused_before_training(spark, tmp_path, change, message):
    est = estimator(LocalStore(str(tmp_path)), Regressor(), 48, 2)
    est._set(**{key: value for key, value in change.items()})
    with pytest.raises(ValueError, match=message):
        est.fit(dataframe(spark, dataset(8)))


def test_more_ranks_than_rows_is_refused(spark, tmp_path):
    with pytest.raises(ValueError, match="2 training rows for 3 ranks"):
        estimator(LocalStore(str(tmp_path)), Regressor(), 3, 3).fit(dataframe(spark, dataset(2)))


def test_horovod_parameters_of_features_hora_lacks(tmp_path):
    with pytest.warns(UserWarning, match="reader_pool_type ignored"):
        TorchEstimator(reader_pool_type="thread")
    with pytest.raises(TypeError, match="transformation_fn not supported"):
        TorchEstimator(transformation_fn=lambda row: row)
    with pytest.raises(TypeError, match="unexpected parameters \\['modle'\\]"):
        TorchEstimator(modle=Regressor())


def test_the_example_learns_the_synthetic_relation(tmp_path):
    """examples/spark/torch_estimator.py (a session of its own): the validation loss falls,
    to below 1.0 (predicting the mean scores 15.5, the variance of y; Spark's row order, and so
    the shards, differ from run to run), and the run's checkpoint is kept."""
    import hora

    hora_root = str(Path(hora.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [hora_root, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(REPO / "examples" / "spark" / "torch_estimator.py"),
                           "--num-proc", "2", "--epochs", "4", "--store", str(tmp_path)],
                          env=env, timeout=180, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    losses = [float(line.rsplit(" ", 1)[1]) for line in done.stdout.splitlines()
              if line.startswith("epoch ")]
    assert len(losses) == 4 and losses[-1] < min(losses[0], 1.0), done.stdout
    assert len(list((tmp_path / "runs").iterdir())) == 1
