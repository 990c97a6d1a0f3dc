"""A party's real code in a thread, for tests that play the other party by hand."""

from __future__ import annotations

import threading


class Party:
    """One party's real code in a thread, for tests that play the other party by hand; ``error`` /
    ``result`` once it has ended.  Like a party process, it closes its channel when it stops, so
    the attacker's next receive fails at once."""

    def __init__(self, fn, channel) -> None:
        self.result = self.error = None

        def target():
            try:
                self.result = fn()
            except BaseException as exc:  # noqa: BLE001 -- inspected by the test
                self.error = exc
            finally:
                channel.close()

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def join(self, timeout: float = 30):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the party under attack hung"
        return self
