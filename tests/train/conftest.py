"""Fixtures the training tests share."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """Training on one thread: two threads on a shared 2-core machine run ~4x slower than one when other jobs
    compete."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
