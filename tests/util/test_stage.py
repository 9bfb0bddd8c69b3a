"""A stage's line and its record: wall and CPU seconds of the stage, and its note."""

import logging
import time

import pytest

from phazec.util.progress import stage


def test_a_stage_logs_its_wall_and_cpu_seconds_and_its_note(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="phazec.util.progress")
    with stage("busy") as busy:
        begin_cpu_s, begin_wall_s = time.process_time(), time.perf_counter()
        # 0.15 s of CPU and of wall: os.times truncates user and system time to ticks of 10 ms
        # each, so the stage may count up to 20 ms less than it spent
        while time.process_time() - begin_cpu_s < 0.15 or time.perf_counter() - begin_wall_s < 0.15:
            pass
        time.sleep(0.1)  # wall, no CPU
        busy.note = "150 ms of CPU"
    (record,) = caplog.records
    fields = record.__dict__
    assert fields["stage"] == "busy"
    assert fields["wall_s"] == busy.wall_s >= 0.25
    assert fields["cpu_s"] == busy.cpu_s >= 0.12
    assert busy.cpu_s < busy.wall_s
    assert record.getMessage() == f"busy: {busy.wall_s:.1f} s, 150 ms of CPU"


def test_a_stage_that_raises_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="phazec.util.progress")
    with pytest.raises(ValueError, match="bad"), stage("failing"):
        raise ValueError("bad")
    assert caplog.records == []
