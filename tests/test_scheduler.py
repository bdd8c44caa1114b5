"""The server's scheduler: precedence of live over bulk, turns within a class, bounded
admission, cancellation; and the engine's Work hooks on real decoding."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from qwen3asr import prepare_audio
from qwen3asr.server.scheduler import BULK, LIVE, QueueFull, Scheduler, SchedulerClosed
from qwen3asr.work import Cancelled, Work

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EN2 = os.path.join(ROOT, "audio", "en_2.wav")


def _wait_for(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


class Holder:
    """A thread that takes one turn and keeps it until released."""

    def __init__(self, client):
        self.client = client
        self.go = threading.Event()
        self.inside = threading.Event()
        self.cancelled_inside = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        _wait_for(self.inside.is_set)

    def _run(self):
        try:
            with self.client.work.unit():
                self.inside.set()
                self.go.wait(10)
        except Cancelled:  # cancelled while it held the turn: the unit's closing check says so
            self.cancelled_inside = True

    def release(self):
        self.go.set()
        self.thread.join(10)


def _queue_units(sched, clients, units, order, errors):
    """Start one thread per client that runs ``units`` units, recording who ran."""
    threads = []
    for c in clients:
        def run(c=c):
            try:
                for _ in range(units):
                    with c.work.unit():
                        order.append(c.name)
            except Exception as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)
        t = threading.Thread(target=run, daemon=True)
        threads.append(t)
    return threads


def test_live_clients_go_before_bulk_ones_that_waited_longer():
    sched = Scheduler()
    holder = Holder(sched.admit("h", BULK))
    order, errors = [], []
    bulk, live = sched.admit("bulk", BULK), sched.admit("live", LIVE)
    (tb,) = _queue_units(sched, [bulk], 1, order, errors)
    tb.start()
    _wait_for(lambda: sched.stats().waiting == 1)
    (tl,) = _queue_units(sched, [live], 1, order, errors)
    tl.start()
    _wait_for(lambda: sched.stats().waiting == 2)
    holder.release()
    tb.join(10), tl.join(10)
    assert not errors
    assert order == ["live", "bulk"]


def test_clients_of_one_class_take_turns_unit_by_unit():
    sched = Scheduler()
    holder = Holder(sched.admit("h", BULK))
    order, errors = [], []
    clients = [sched.admit(n, BULK) for n in ("a", "b", "c")]
    threads = _queue_units(sched, clients, 4, order, errors)
    for i, t in enumerate(threads):
        t.start()
        _wait_for(lambda: sched.stats().waiting == i + 1)
    holder.release()
    for t in threads:
        t.join(10)
    assert not errors
    # Nobody runs a second unit while another waiting client has run fewer.
    assert order == ["a", "b", "c"] * 4
    assert sched.stats().units == 13


def test_admission_is_bounded_and_a_closed_client_frees_its_slot():
    sched = Scheduler(max_clients=2)
    a, b = sched.admit("a"), sched.admit("b")
    with pytest.raises(QueueFull, match="limit 2"):
        sched.admit("c")
    assert sched.stats().rejected == 1
    a.close()
    a.close()  # harmless twice
    c = sched.admit("c")
    assert sched.active == 2
    b.close(), c.close()
    with pytest.raises(ValueError, match="live, bulk"):
        sched.admit("x", "urgent")
    with pytest.raises(ValueError, match="max_clients"):
        Scheduler(max_clients=0)


def test_a_cancelled_waiter_leaves_the_queue_and_the_others_go_on():
    sched = Scheduler()
    holder = Holder(sched.admit("h"))
    gone, stays = sched.admit("gone"), sched.admit("stays")
    order, errors = [], []
    tg, ts = _queue_units(sched, [gone, stays], 1, order, errors)
    tg.start()
    _wait_for(lambda: sched.stats().waiting == 1)
    ts.start()
    _wait_for(lambda: sched.stats().waiting == 2)
    gone.cancel()
    tg.join(10)
    assert len(errors) == 1 and isinstance(errors[0], Cancelled)
    holder.release()
    ts.join(10)
    assert order == ["stays"]
    assert sched.stats().cancelled == 1 and sched.stats().waiting == 0


def test_optional_work_gives_way_to_the_stream_end_and_to_waiting_clients():
    """Client.work.newer (previews' cue, qwen3asr.work.Work.newer): set once the client's stream
    end is queued (the server sets ``ending``) and while another client waits for a turn."""
    sched = Scheduler()
    a = sched.admit("a")
    assert not a.work.superseded
    a.ending.set()
    assert a.work.superseded
    a.ending.clear()
    holder = Holder(a)  # a holds the turn, as during a preview
    assert not a.work.superseded  # a's own turn is not another client waiting
    b = sched.admit("b")
    order, errors = [], []
    (t,) = _queue_units(sched, [b], 1, order, errors)
    t.start()
    _wait_for(lambda: sched.stats().waiting == 1)
    assert a.work.superseded and not b.work.superseded
    holder.release()
    t.join(10)
    assert order == ["b"] and not errors and not a.work.superseded


def _one_holding_one_waiting(sched, units):
    """A client holding the turn (a Holder) and one waiting for it, with ``units`` units to run
    in its own thread: (holder, waiter, its thread, the order of units run, errors raised)."""
    holder = Holder(sched.admit("h"))
    w = sched.admit("w")
    order, errors = [], []
    (t,) = _queue_units(sched, [w], units, order, errors)
    t.start()
    _wait_for(lambda: sched.stats().waiting == 1)
    return holder, w, t, order, errors


def test_close_refuses_new_clients_and_cancels_waiters():
    sched = Scheduler()
    holder, w, t, order, errors = _one_holding_one_waiting(sched, 1)
    sched.close()
    t.join(10)
    assert isinstance(errors[0], Cancelled)
    with pytest.raises(SchedulerClosed):
        sched.admit("late")
    holder.release()  # the running unit finishes normally


def test_graceful_shutdown_refuses_new_lets_the_admitted_finish_then_cancels_the_rest():
    sched = Scheduler()
    holder, w, t, order, errors = _one_holding_one_waiting(sched, 2)
    sched.refuse_new()
    with pytest.raises(SchedulerClosed):
        sched.admit("late")
    assert sched.stats().waiting == 1 and not w.cancelled  # the admitted are not touched
    assert sched.wait_idle(0.05) is False
    holder.release()
    _wait_for(lambda: order == ["w", "w"])  # the waiter still got its turns
    t.join(10)
    holder.client.close()
    assert sched.wait_idle(0.05) is False  # w is admitted until it is closed
    assert sched.cancel_all() == 1 and w.cancelled and errors == []
    w.close()
    assert sched.wait_idle(0) is True and sched.cancel_all() == 0


def test_cancel_all_stops_running_and_waiting_clients():
    sched = Scheduler()
    holder, w, t, order, errors = _one_holding_one_waiting(sched, 1)
    assert sched.cancel_all() == 2
    t.join(10)
    assert isinstance(errors[0], Cancelled) and order == []
    assert holder.client.cancelled  # its running unit stops at its next check (the engine: the next token)
    holder.release()
    assert holder.cancelled_inside
    assert sched.stats().cancelled == 2


# ------------------------------------------------------------------ the engine's hooks

def test_work_units_are_one_pass_or_one_per_chunk(default_engine):
    units = []
    gate_lock = threading.Lock()

    def gate():
        units.append(1)
        return gate_lock

    work = Work(gate=gate)
    one = default_engine.transcribe("audio/en_1.wav", work=work)
    assert len(units) == 1 and one.text
    units.clear()
    chunked = default_engine.transcribe("audio/en_1.wav", chunk_size=1.0, work=work)
    assert len(units) == chunked.stats.encoder_calls >= 2
    units.clear()
    stream = default_engine.create_stream(chunk_size=1.0, work=work)
    pcm = __import__("qwen3asr").prepare_audio("audio/en_1.wav")
    r = stream.feed_audio(pcm)
    r = stream.finish()
    assert len(units) == len(r.chunks) >= 2


def test_a_cancelled_request_stops_and_the_engine_serves_the_next(default_engine):
    expected = default_engine.transcribe("audio/en_1.wav").text
    cancel = threading.Event()
    tokens = []

    def gate():
        return threading.Lock()

    # Cancelled mid-generation (from the token callback): the one-pass run stops at once.
    def on_text(piece):
        tokens.append(piece)
        cancel.set()

    with pytest.raises(Cancelled):
        default_engine.transcribe("audio/en_1.wav", on_text=on_text, work=Work(gate=gate, cancel=cancel))
    assert len(tokens) == 1
    # Chunked: cancelled after the first chunk, no further chunk runs.
    cancel.clear()
    seen = []

    def progress(done, total):
        seen.append(done)
        cancel.set()

    long = np.tile(__import__("qwen3asr").prepare_audio("audio/en_1.wav"), 3)
    with pytest.raises(Cancelled):
        default_engine.transcribe(long, chunk_size=2.0, progress=progress, work=Work(cancel=cancel))
    assert len(seen) == 1
    assert default_engine.transcribe("audio/en_1.wav").text == expected


def test_a_cancel_stops_a_stream_chunk(default_engine):
    import threading

    from qwen3asr import Work

    flag = threading.Event()
    s = default_engine.create_stream(chunk_size=1.0, work=Work(cancel=flag))
    pcm = prepare_audio(EN2)
    s.feed_audio(pcm[:16000])
    flag.set()
    with pytest.raises(Cancelled):
        s.feed_audio(pcm[16000:])
    assert np.isfinite(default_engine.transcribe(EN2).stats.real_time_factor)
