"""bench.profile_threads: the window is counted back from the end, idle leaves are not work,
and the event loop's samples go to the first group found anywhere in their stack."""

from __future__ import annotations

from bench.profile_threads import Window, group_of, is_idle, summarise


def _doc() -> dict[str, object]:
    frames = [
        {"name": "BaseEventLoop.run_forever", "file": "/x/base_events.py", "line": 1},
        {"name": "EpollSelector.select", "file": "/x/selectors.py", "line": 2},
        {"name": "speculate_step", "file": "/x/speculate.py", "line": 3},
        {"name": "Table.on_key_set", "file": "/x/table.py", "line": 4},
        {"name": "Producer.poll", "file": "/x/sends.py", "line": 5},
    ]
    loop, select, spec, changelog = [0], [0, 1], [0, 2], [0, 2, 3]
    # 10 samples at 10 Hz: the first 4 are start-up (outside the window), then 6 of the step
    main = [spec] * 4 + [select, spec, spec, changelog, loop, select]
    other = [[4]] * 10
    return {
        "shared": {"frames": frames},
        "profiles": [
            {"name": 'Thread 1 ""', "samples": main},
            {"name": 'Thread 2 "deliveries"', "samples": other},
        ],
    }


def test_the_window_counts_back_from_the_end_and_idle_samples_are_not_work() -> None:
    out = summarise(_doc(), Window(start_s=0.6, end_s=0.0, rate_hz=10))
    # 6 samples in the window, 2 idle (epoll): 4 of 6 ticks busy
    assert out["busy_percent_of_a_core"]['Thread 1 ""'] == round(100 * 4 / 6, 1)
    assert 'Thread 2 "deliveries"' not in out["busy_percent_of_a_core"]  # poll: waiting
    # the changelog write under the speculate step counts as the changelog's (listed first)
    assert out["event_loop_percent_of_a_core"] == {
        "speculate step": round(100 * 2 / 6, 1),
        "changelog send (Faust/aiokafka producer)": round(100 / 6, 1),
        "other": round(100 / 6, 1),
    }


def test_a_window_ending_before_the_end_leaves_the_last_samples_out() -> None:
    out = summarise(_doc(), Window(start_s=0.6, end_s=0.2, rate_hz=10))
    # samples 4..7: select, spec, spec, changelog: 3 of 4 ticks busy
    assert out["busy_percent_of_a_core"]['Thread 1 ""'] == 75.0


def test_the_event_loop_is_the_main_thread_under_either_name_py_spy_gives_it() -> None:
    doc = _doc()
    doc["profiles"][0]["name"] = 'Thread 1 "MainThread"'  # type: ignore[index]
    out = summarise(doc, Window(start_s=0.6, end_s=0.0, rate_hz=10))
    assert out["event_loop_percent_of_a_core"]["speculate step"] == round(100 * 2 / 6, 1)


def test_idle_and_groups_by_frame_names() -> None:
    assert is_idle([]) and is_idle(["a (x.py:1)", "EpollSelector.select (selectors.py:2)"])
    assert not is_idle(["EpollSelector.select (selectors.py:2)", "decode (codec.py:9)"])
    assert group_of(["x (a.py:1)", "speculate_step (s.py:2)"]) == "speculate step"
    assert group_of(["x (a.py:1)"]) == "other"
