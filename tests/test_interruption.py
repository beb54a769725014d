"""A stop signal inside an uninterruptible block (a database write) waits for the block to end."""

from __future__ import annotations

import os
import signal

import pytest

from winnow.commands.common import Stopped, stop_on_signal
from winnow.interruption import uninterruptible


def test_a_stop_inside_the_block_is_raised_when_it_ends():
    steps = []
    with pytest.raises(Stopped) as stopped, stop_on_signal(lambda: 0):
        with uninterruptible():
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("after the signal")  # still run: the block is whole
            with uninterruptible():  # a nested block does not raise it early
                steps.append("nested")
            steps.append("end of the block")
        steps.append("after the block")  # never run: the stop is raised as the block ends
    assert steps == ["after the signal", "nested", "end of the block"]
    assert stopped.value.signum == signal.SIGINT


def test_a_stop_outside_any_block_is_raised_at_once():
    steps = []
    with pytest.raises(Stopped), stop_on_signal(lambda: 0):
        os.kill(os.getpid(), signal.SIGINT)
        steps.append("after the signal")
    assert steps == []
    with uninterruptible():  # nothing kept for a later block
        steps.append("later")
    assert steps == ["later"]


def test_the_study_storage_finishes_a_write_that_a_stop_interrupts(tmp_path):
    optuna = pytest.importorskip("optuna")
    from winnow.tuning.study import _uninterruptible_storage

    class SignalledStorage(optuna.storages.RDBStorage):
        def set_study_user_attr(self, study_id, key, value):
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C between the steps of the write
            super().set_study_user_attr(study_id, key, value)

    storage = _uninterruptible_storage(SignalledStorage)(f"sqlite:///{tmp_path / 'study.sqlite'}")
    study_id = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], "s")
    with pytest.raises(Stopped), stop_on_signal(lambda: 0):
        storage.set_study_user_attr(study_id, "session", 1.5)
    again = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.sqlite'}")
    assert again.get_study_user_attrs(study_id) == {"session": 1.5}  # the write landed whole
    assert storage.set_study_user_attr.__wrapped__ is SignalledStorage.set_study_user_attr
    # Optuna's cache calls some private operations directly: they run whole too.
    assert storage._get_trials.__wrapped__ is optuna.storages.RDBStorage._get_trials
