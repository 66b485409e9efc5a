"""``hora.spark.keras.KerasEstimator`` on a local Spark session (conftest.py): trained weights
against a single-process reference, transform against ``model.predict``, validation and
resuming from a checkpoint, and the parameter checks.

Runs in the TensorFlow environment (with pyspark, pyarrow, fsspec and psutil installed);
skipped where TensorFlow is missing.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from hora.spark.common.store import Store
from hora.spark.keras import KerasEstimator, KerasModel, remote
from pyspark.ml.linalg import DenseVector, Vectors, VectorUDT
from pyspark.sql.types import DoubleType

TRUE_W = np.array([1.5, -2.0, 0.5])
START_W = np.array([[0.1], [0.2], [-0.3]], dtype=np.float32)
LR = 0.05


def linear_model() -> keras.Model:
    """``y = x @ w`` with a fixed starting ``w``, so every rank and the reference agree."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, use_bias=False)])
    model.layers[0].set_weights([START_W])
    return model


def regression_df(spark, rows: int, seed: int = 0, with_val: bool = False):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 3))
    y = x @ TRUE_W
    records = [(Vectors.dense(x[i]), float(y[i]), bool(i % 4 == 0), 0.5 + float(x[i, 0] > 0))
               for i in range(rows)]
    return spark.createDataFrame(records, ["x", "y", "is_val", "w"]), x, y


def estimator(store, **kwargs) -> KerasEstimator:
    params = {"model": linear_model(), "store": store, "optimizer": keras.optimizers.SGD(LR),
              "loss": "mse", "feature_cols": ["x"], "label_cols": ["y"], "verbose": 0,
              "partitions_per_process": 1}
    params.update(kwargs)
    return KerasEstimator(**params)


@pytest.mark.parametrize("num_proc,weighted", [(2, False), (2, True), (3, False)])
def test_full_batch_training_matches_a_single_process_reference(spark, tmp_path, num_proc,
                                                                 weighted):
    # One full-shard batch per rank and step: the averaged gradient is the gradient of the
    # mean over all rows whatever order Spark wrote them in; the rate is LR * ranks. A
    # sample weight multiplies each row's loss before the mean (Keras's sum_over_batch_size).
    rows, epochs = 12 * num_proc, 3
    df, x, y = regression_df(spark, rows)
    sample_weight = 0.5 + (x[:, :1] > 0) if weighted else np.ones((rows, 1))
    model = estimator(Store.create(str(tmp_path)), num_proc=num_proc, shuffle=False,
                      batch_size=rows // num_proc, epochs=epochs,
                      sample_weight_col="w" if weighted else None).fit(df)

    w = START_W.astype(np.float64)
    losses = []
    for _ in range(epochs):
        err = x @ w - y[:, None]
        losses.append(float(np.mean(sample_weight * err ** 2)))
        w = w - LR * num_proc * (2.0 / rows) * x.T @ (sample_weight * err)
    trained = model.getModel()
    np.testing.assert_allclose(trained.layers[0].get_weights()[0], w, rtol=1e-5)
    np.testing.assert_allclose(model.getHistory()["loss"], losses, rtol=1e-5)
    # The returned model carries the rate it was given, not the scaled one (as Horovod).
    assert float(np.asarray(trained.optimizer.learning_rate)) == pytest.approx(LR)


def two_output_model() -> keras.Model:
    inputs = keras.Input((3,))
    scalar = keras.layers.Dense(1, name="y")(inputs)
    vector = keras.layers.Dense(2, name="z")(inputs)
    return keras.Model(inputs, [scalar, vector])


def test_transform_adds_each_output_with_the_label_type(spark, tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 3)).astype(np.float32)
    df = spark.createDataFrame(
        [(Vectors.dense(x[i]), float(x[i].sum()), Vectors.dense([x[i, 0], -x[i, 1]]))
         for i in range(len(x))], ["x", "y", "z"])
    model = KerasEstimator(
        num_proc=2, model=two_output_model(), store=Store.create(str(tmp_path)),
        optimizer=keras.optimizers.Adam(0.01), loss=["mse", "mse"], loss_weights=[1.0, 0.5],
        metrics=[["mae"], ["mae"]], feature_cols=["x"], label_cols=["y", "z"], batch_size=4,
        epochs=2, verbose=0, random_seed=3).fit(df)
    assert isinstance(model, KerasModel)
    assert len(model.getHistory()["loss"]) == 2

    out = model.transform(df)
    assert out.schema["y__output"].dataType == DoubleType()
    assert isinstance(out.schema["z__output"].dataType, VectorUDT)
    rows = out.collect()
    got_x = np.array([r["x"].toArray() for r in rows], dtype=np.float32)
    want_y, want_z = model.getModel().predict(got_x, verbose=0)
    np.testing.assert_allclose([r["y__output"] for r in rows], want_y[:, 0], rtol=1e-5,
                               atol=1e-6)
    assert all(isinstance(r["z__output"], DenseVector) for r in rows)
    np.testing.assert_allclose([r["z__output"].toArray() for r in rows], want_z, rtol=1e-5,
                               atol=1e-6)


def test_validation_checkpoint_and_resuming_from_it(spark, tmp_path):
    store = Store.create(str(tmp_path))
    df, _, _ = regression_df(spark, 64)
    first = estimator(store, num_proc=2, validation=0.25, batch_size=8, epochs=2,
                      run_id="resume", random_seed=5).fit(df)
    history = first.getHistory()
    assert len(history["val_loss"]) == 2 and len(history["loss"]) == 2
    checkpoint = store.get_checkpoint_path("resume")
    assert store.exists(checkpoint)
    saved = remote.model_from_bytes(store.read(checkpoint), None)
    np.testing.assert_array_equal(saved.layers[0].get_weights()[0],
                                  first.getModel().layers[0].get_weights()[0])

    # Same run_id: training goes on from the checkpoint, so its first epoch is already below
    # the first fit's last (a fresh start would be back near history["loss"][0]).
    second = estimator(store, num_proc=2, validation="is_val", batch_size=8, epochs=1,
                       run_id="resume", random_seed=5).fit(df)
    resumed = second.getHistory()
    assert "val_loss" in resumed
    assert resumed["loss"][0] < history["loss"][-1]


@pytest.mark.parametrize("missing", ["loss", "optimizer", "feature_cols"])
def test_a_missing_parameter_is_named(spark, tmp_path, missing):
    df, _, _ = regression_df(spark, 8)
    with pytest.raises(ValueError, match=missing):
        estimator(Store.create(str(tmp_path)), num_proc=2, **{missing: None}).fit(df)


def test_num_proc_and_backend_together_are_refused(spark, tmp_path):
    from hora.spark.common.backend import SparkBackend

    df, _, _ = regression_df(spark, 8)
    with pytest.raises(ValueError, match="backend and num_proc"):
        estimator(Store.create(str(tmp_path)), num_proc=2, backend=SparkBackend(2)).fit(df)


def test_custom_objects_are_accepted_and_other_missing_features_refused(tmp_path):
    KerasEstimator(custom_objects={"Dense": keras.layers.Dense})
    with pytest.raises(TypeError, match="transformation_fn"):
        KerasEstimator(transformation_fn=lambda row: row)
