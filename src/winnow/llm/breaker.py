"""One endpoint's circuit breaker: when it leaves the pool of :mod:`.dispatch` and when it is tried again.

Closed, an endpoint takes requests. ``failures`` passing failures in a row open it for
``cooldown_seconds``: the dispatcher sends it nothing. Then it is half-open: one request is let through as
a probe, and its outcome decides (an answer closes the breaker, a failure opens it for another cool-down).
So a dead endpoint beside a healthy one costs a handful of requests, not half of them. This is Nygard's
circuit breaker ("Release It!", 2007, ch. 5), per endpoint as in Envoy's outlier detection.

A :class:`Breaker` is not locked on its own: the dispatcher changes it, and reads it to choose an
endpoint, under its one lock, so that the choice and the breaker's state stay consistent.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BreakerPolicy:
    """When an endpoint leaves the pool and when it is tried again: ``failures`` in a row open its
    breaker for ``cooldown_seconds``; then one probe request decides (half-open)."""

    failures: int = 3
    cooldown_seconds: float = 5.0


class Breaker:
    """The state of one endpoint's breaker, and its counts for :meth:`Dispatcher.stats`."""

    def __init__(self, policy: BreakerPolicy) -> None:
        self.policy = policy
        self.failures_in_a_row = 0
        self.open_until = 0.0  # 0 while closed; else the moment the cool-down ends (time.monotonic)
        self.probing = False  # a half-open probe is out: the others wait for its outcome
        self.failures = 0
        self.times_opened = 0

    @property
    def is_open(self) -> bool:
        """Open or half-open: the last requests failed and no answer has closed it since."""
        return self.open_until > 0.0

    def state(self, now: float) -> str:
        """``closed`` (taking requests), ``open`` (cooling down) or ``half-open`` (a probe may go, or is out)."""
        if self.open_until == 0.0:
            return "closed"
        return "open" if now < self.open_until else "half-open"

    def admits(self, now: float) -> bool:
        """Whether a request may go to the endpoint now: the breaker is closed, or its cool-down is over
        and no probe is out yet (half-open)."""
        return self.open_until == 0.0 or (now >= self.open_until and not self.probing)

    def sent(self) -> None:
        """A request goes out; sent while the breaker is open, it is the half-open probe."""
        if self.open_until:
            self.probing = True

    def returned(self) -> None:
        """A request came back (answered, failed or cancelled): a probe out is over."""
        self.probing = False

    def answered(self) -> None:
        """An answer (or the request's own refusal, a 4xx: the server is alive) closes the breaker."""
        self.failures_in_a_row, self.open_until = 0, 0.0

    def failed(self, now: float) -> None:
        """A passing failure; enough in a row, or any while open (a failed probe), open it anew."""
        self.failures += 1
        self.failures_in_a_row += 1
        if self.open_until or self.failures_in_a_row >= self.policy.failures:
            self.times_opened += self.open_until == 0.0
            self.open_until = now + self.policy.cooldown_seconds
