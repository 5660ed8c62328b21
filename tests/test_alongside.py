"""compress.core.alongside: a job in a second process; its result, its errors, stopping it."""
import os
import time

import pytest

from compress.core.alongside import Alongside
from compress.core.errors import DataError


def _square_and_threads(x):
    import torch

    return x * x, torch.get_num_threads(), os.getpid()


def _bad_row(path):
    raise DataError(f"{path}:3: label 'maybe' is not one of the training labels")


def _write_then_sleep(path):
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)


def _exit_hard():
    os._exit(7)


def test_result_comes_back_from_another_process_with_its_threads():
    with Alongside(_square_and_threads, (12,), threads=1, name="job") as job:
        value, threads, pid = job.result()
    assert (value, threads) == (144, 1) and pid != os.getpid()


def test_the_jobs_error_is_raised_here_with_its_type_and_traceback():
    with pytest.raises(DataError, match=r"rows.csv:3: label 'maybe'") as e:
        with Alongside(_bad_row, ("rows.csv",), threads=1, name="control") as job:
            job.result()
    assert any("raised in the control process" in n and "_bad_row" in n for n in e.value.__notes__)


def test_a_job_that_dies_is_an_error_naming_it():
    with pytest.raises(RuntimeError, match=r"the control process ended without a result \(exit code 7"):
        with Alongside(_exit_hard, (), threads=1, name="control") as job:
            job.result()


def test_a_failure_here_stops_the_job(tmp_path):
    marker = tmp_path / "pid"
    with pytest.raises(KeyError):
        with Alongside(_write_then_sleep, (str(marker),), threads=1, name="job") as job:
            for _ in range(600):  # the job has started once it wrote its pid
                if marker.exists() and marker.read_text():
                    break
                time.sleep(0.05)
            raise KeyError("the student failed")
    assert not job._proc.is_alive() and job._proc.exitcode == 143  # SIGTERM -> SystemExit(143)
