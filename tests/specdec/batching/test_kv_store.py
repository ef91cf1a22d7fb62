"""The KV cache budget: reservations wait for room, requests that never fit are refused."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from specdec.batching import KVBudget, SessionKV
from specdec.batching.kv_store import KVShape
from specdec.errors import CapacityError, InvalidRequestError

SHAPE = KVShape(num_layers=2, num_kv_heads=1, head_dim=4, dtype=torch.float32, device=torch.device("cpu"))


def test_a_session_that_can_never_fit_is_refused_at_once_naming_the_field():
    budget = KVBudget(capacity_tokens=100, bytes_per_token=SHAPE.bytes_per_token)
    with pytest.raises(InvalidRequestError) as raised:
        SessionKV(SHAPE, budget, 101, timeout_s=10)
    assert raised.value.field == "max_tokens" and budget.used_tokens == 0


def test_a_full_budget_makes_new_sessions_wait_for_room_then_admits_them():
    budget = KVBudget(capacity_tokens=100, bytes_per_token=SHAPE.bytes_per_token)
    first = SessionKV(SHAPE, budget, 70)
    admitted = []
    waiter = threading.Thread(target=lambda: admitted.append(SessionKV(SHAPE, budget, 50, timeout_s=10)))
    waiter.start()
    time.sleep(0.2)
    assert not admitted and budget.used_tokens == 70  # waiting, not failing
    first.release()
    waiter.join(5)
    assert len(admitted) == 1 and budget.used_tokens == 50 and budget.sessions == 1


def test_waiting_is_bounded_by_the_admission_timeout():
    budget = KVBudget(capacity_tokens=100, bytes_per_token=SHAPE.bytes_per_token)
    SessionKV(SHAPE, budget, 90)
    started = time.monotonic()
    with pytest.raises(CapacityError, match="no room freed"):
        SessionKV(SHAPE, budget, 20, timeout_s=0.2)
    assert time.monotonic() - started < 2 and budget.used_tokens == 90


def test_growth_keeps_the_cached_entries_and_is_checked_against_the_budget():
    budget = KVBudget(capacity_tokens=40, bytes_per_token=SHAPE.bytes_per_token)
    kv = SessionKV(SHAPE, budget, 8)
    keys = torch.arange(24, dtype=torch.float32).reshape(1, 6, 4)
    kv.write(0, 0, keys, -keys)
    kv.length = 6
    kv.ensure_capacity(12)
    assert kv.capacity == 16 and budget.used_tokens == 16
    assert torch.equal(kv.keys[0][:, :6], keys) and torch.equal(kv.values[0][:, :6], -keys)
    with pytest.raises(CapacityError):
        kv.ensure_capacity(41)
    kv.release()
    kv.release()  # idempotent: freed once
    assert budget.used_tokens == 0 and budget.sessions == 0
