"""The client survives the console being killed and restarted mid-stream: after its retries,
the run's event log holds every event exactly once, in order."""

import threading
import time
import uuid

from gavel_sdk import RunEvents

from tests.support.live_console import LiveConsole

TOTAL = 1500
BATCH = 25


def killer(console, gavel, run_id, thresholds, log):
    """SIGKILL the server each time the client passes a threshold, then start it again."""
    for threshold in thresholds:
        while (gavel.last_seq(run_id) or 0) < threshold:
            time.sleep(0.005)
        console.stop(kill=True)
        log.append(gavel.last_seq(run_id))
        time.sleep(0.5)
        console.start()


def test_events_land_exactly_once_across_two_server_kills(gavel, live_console):
    run_id = f"run_restart_{uuid.uuid4().hex[:8]}"
    gavel.admit_run(run_id, agent_id="restart-bot", principal_id=LiveConsole.PRINCIPAL)
    events = RunEvents(agent_id="restart-bot", model="m")
    events.step_started()
    for i in range(TOTAL):
        events.message("assistant", f"event-{i}")
    batch = events.drain()
    kills: list = []
    thread = threading.Thread(
        target=killer, args=(live_console, gavel, run_id, [300, 900], kills), daemon=True
    )
    thread.start()
    sent = 0
    for start in range(0, len(batch), BATCH):  # batch by batch, as a runtime streams
        sent = gavel.send_events(run_id, batch[start : start + BATCH])
    thread.join(60)

    assert len(kills) == 2 and all(k < TOTAL for k in kills)  # both kills hit mid-stream
    assert sent == TOTAL + 1
    run = gavel.get_run(run_id)
    assert run.last_seq == TOTAL + 1 and run.steps == 1
    texts = [m["content"] for m in gavel.get_state(run_id)["messages"]]
    assert texts == [f"event-{i}" for i in range(TOTAL)]  # each exactly once, in order
