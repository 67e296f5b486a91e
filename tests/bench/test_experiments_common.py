"""bench.experiments.common's pure parts: when a job counts as keeping up before a measured migration."""

from __future__ import annotations

import pytest

from bench.experiments.common import keeps_up

pytestmark = pytest.mark.bench


def test_keeping_up_allows_two_epochs_of_input_waiting_where_an_epoch_outlasts_the_trigger() -> None:
    # 1 000 rows/s, 500 ms trigger: on a quiet machine two triggers' worth (1 000 rows) may wait
    assert keeps_up([(400, 900), (450, 1000), (480, 950)], 1000, 500)
    assert not keeps_up([(400, 900), (450, 1100), (480, 950)], 1000, 500)
    # beside the suite the epochs take 1.5 s: a job that keeps up has 1.5 s of input waiting, which
    # the trigger-based limit (the smoke's 2 x 180 s waits) never accepted; a growing backlog still fails
    assert keeps_up([(1500, 2400), (1400, 2900), (1600, 2100)], 1000, 500)
    assert not keeps_up([(1500, 2400), (1400, 4000), (1600, 6000)], 1000, 500)
    assert not keeps_up([(400, 0), (400, 0)], 1000, 500), "three epochs are needed"
    assert keeps_up([(400, None), (400, 150), (400, 200)], 10, 500), "a floor of 200 rows at low rates"

