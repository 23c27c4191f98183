"""Reference counts report their transitions and never go negative."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_steward.lifecycle.refcount import RefCounts


def test_transitions_are_reported() -> None:
    refs: RefCounts[str] = RefCounts()
    refs.track("k")
    assert refs.count("k") == 0 and list(refs.unreferenced()) == ["k"]
    assert refs.acquire("k") is True          # rescued from zero
    assert refs.acquire("k", 2) is False
    assert refs.release("k", 2) is False
    assert refs.release("k") is True          # now unreferenced
    assert refs.count("k") == 0


def test_track_keeps_an_existing_count() -> None:
    refs: RefCounts[str] = RefCounts()
    refs.track("k", initial=3)
    refs.track("k")
    assert refs.count("k") == 3


def test_over_release_clamps_and_is_counted(caplog: pytest.LogCaptureFixture) -> None:
    refs: RefCounts[str] = RefCounts()
    refs.track("k", initial=1)
    assert refs.release("k", 5) is True
    assert refs.count("k") == 0 and refs.underflows == 1
    assert refs.release("k") is False and refs.underflows == 2
    assert refs.release("untracked") is False and refs.underflows == 3
    assert "exceeds its 1 references" in caplog.text


def test_reset_and_forget() -> None:
    refs: RefCounts[str] = RefCounts()
    refs.track("k", initial=2)
    assert refs.reset("k") is True and refs.count("k") == 0 and refs.is_tracked("k")
    refs.forget("k")
    assert not refs.is_tracked("k") and len(refs) == 0


@pytest.mark.parametrize("bad", [0, -1])
def test_non_positive_amounts_are_rejected(bad: int) -> None:
    refs: RefCounts[str] = RefCounts()
    with pytest.raises(ValueError, match="'k'"):
        refs.acquire("k", bad)
    with pytest.raises(ValueError, match="'k'"):
        refs.release("k", bad)
    with pytest.raises(ValueError, match="'k'"):
        refs.track("k", bad - 1)


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 3)), max_size=50))
def test_count_matches_a_clamped_model(ops: list[tuple[bool, int]]) -> None:
    refs: RefCounts[str] = RefCounts()
    refs.track("k")
    model = 0
    for acquire, n in ops:
        if acquire:
            assert refs.acquire("k", n) == (model == 0)
            model += n
        else:
            assert refs.release("k", n) == (model > 0 and model - n <= 0)
            model = max(0, model - n)
        assert refs.count("k") == model >= 0
