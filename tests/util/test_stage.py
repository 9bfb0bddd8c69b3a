"""A stage's line and its record: wall and CPU seconds of the stage, and its note."""

import logging
import time

import pytest

from phazec.util.progress import stage


def test_a_stage_logs_its_wall_and_cpu_seconds_and_its_note(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="phazec.util.progress")
    with stage("busy") as busy:
        begin_cpu_s, begin_wall_s = time.process_time(), time.perf_counter()
        # CPU this process spends, for at least 0.1 s of wall: another thread's CPU counts too
        while time.process_time() - begin_cpu_s < 0.1 or time.perf_counter() - begin_wall_s < 0.1:
            pass
        time.sleep(0.1)  # wall, no CPU
        busy.note = "100 ms of CPU"
    (record,) = caplog.records
    fields = record.__dict__
    assert fields["stage"] == "busy"
    assert fields["wall_s"] == busy.wall_s >= 0.2
    assert fields["cpu_s"] == busy.cpu_s >= 0.09  # os.times counts in ticks of 10 ms
    assert busy.cpu_s < busy.wall_s
    assert record.getMessage() == f"busy: {busy.wall_s:.1f} s, 100 ms of CPU"


def test_a_stage_that_raises_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="phazec.util.progress")
    with pytest.raises(ValueError, match="bad"), stage("failing"):
        raise ValueError("bad")
    assert caplog.records == []
