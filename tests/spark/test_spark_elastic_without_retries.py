"""``hora.spark.run_elastic`` on a local Spark session that does not retry failed tasks
(``local[3]``, conftest.py's ``spark``): a worker that fails is not replaced, so too few
workers end the job with a clear error after ``elastic_timeout``."""

from __future__ import annotations

import sys
import time

import hora.spark
import pytest
from pyspark import cloudpickle
from test_spark_elastic import EPOCHS, elastic_training

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_too_few_workers_for_min_num_proc_end_the_job_after_elastic_timeout(spark, tmp_path):
    start = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        hora.spark.run_elastic(elastic_training, args=(EPOCHS, str(tmp_path / "failed")),
                               kwargs={"fail": True}, num_proc=2, elastic_timeout=2)
    assert time.monotonic() - start < 20
    message = str(info.value)
    assert "fewer than min_num_proc 2 workers (1 ready) for 2 s (elastic_timeout)" in message
    assert "ValueError: worker gave up on purpose" in message  # the first failure's traceback
    assert "elastic_training" in message
