"""The start pipeline: accepted sandboxes wait in one queue, are placed oldest first on free node slots, pull their
image (one shared pull per node and image), and boot (the half of the control plane between PENDING and RUNNING).

Boot time = lognormal(median, sigma) x `max(1, n_booting / knee) ** exponent` + a load delay, n_booting (the
sandboxes past their pull and not yet RUNNING, this one included) counted when the boot starts: a sandbox still
waiting for its image is PROVISIONING but not booting, so a cold cache queues pulls without also collapsing boots; a resumed or forked sandbox boots in its `[sandbox]` time instead (`pausing.py`) and
pulls nothing. With a profile `[account]` section the pipeline also serves boots at a bounded rate: at most
`max_starting` at once and a token bucket of `start_per_s` / `start_burst` on boot starts; a boot that may not
start yet waits its turn (still PROVISIONING), oldest first. Sandboxes that must wait ask the autoscaler (`autoscale.py`) for nodes. How a sandbox ends (and so
leaves the pipeline) is the simulator's (`simulator.py`, `_end`).
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Callable

from providers.sim.core.autoscale import Autoscaler
from providers.sim.core.clock import SimClock, TimerHandle
from providers.sim.core.draws import Stream
from providers.sim.core.image_pulls import ImageLayers, Layer, declared_size_mb, registry
from providers.sim.core.pool import Node, NodePool, Pull
from providers.sim.core.profile import Profile
from providers.sim.core.records import (
    _BOOTING,
    _PULLING,
    _QUEUED,
    _RUNNING,
    ErrorType,
    SandboxStatus,
    SimSandbox,
)

EndSandbox = Callable[[SimSandbox, SandboxStatus, str | None, str | None], None]


class StartPipeline:
    """One account's queue, node pool and boots. `end` ends a sandbox (pull failed, boot crashed), `notify` reports a
    status change, `special_boot` gives a resumed or forked sandbox's boot time."""

    def __init__(
        self,
        profile: Profile,
        seed: int,
        clock: SimClock,
        *,
        end: EndSandbox,
        notify: Callable[[SimSandbox], None],
        special_boot: Callable[[SimSandbox], float],
    ) -> None:
        self.profile = profile
        self.seed = seed
        self.clock = clock
        self._end = end
        self._notify = notify
        self._special_boot = special_boot
        self.pool = NodePool(profile.pool.slots_per_node)
        self.queue: deque[SimSandbox] = deque()
        self.n_waiting = 0
        self.n_provisioning = 0
        self.peak_provisioning = 0
        self.n_booting = 0  # pulled (or needing no pull) and not yet RUNNING: what the boot power law counts
        self._dispatch_timer: TimerHandle | None = None
        self.autoscaler = Autoscaler(self.pool, profile.pool, clock, self.dispatch)
        # pulls by size (`image_pulls.py`): the image's layers, and the registry every layer flow shares
        self.layers = ImageLayers(profile.image)
        self.registry = registry(profile.image, clock)
        self._layers_of: dict[tuple[str, float | None], tuple[Layer, ...]] = {}
        self._image_layers: dict[str, tuple[Layer, ...]] = {}  # image -> its layers, as the last pull resolved them
        # the start pipeline's own throughput (profile [account]): boots holding a start, and those waiting for one
        self._starting: set[str] = set()
        self._start_wait: deque[SimSandbox] = deque()
        self._start_tokens = profile.account.start_burst if profile.account is not None else 0.0
        self._start_tokens_at = clock.now()
        self._start_timer: TimerHandle | None = None
        self.start_waits = 0  # boots that had to wait for the pipeline (a stat)
        for _ in range(profile.pool.initial_nodes):
            self.pool.add(warm=profile.pool.initial_nodes_warm, now=clock.now())

    def no_room(self) -> bool:
        """The pool is at its size limit, full, and so is its queue (a create is refused as CAPACITY)."""
        pool = self.pool
        spec = self.profile.pool
        at_max = len(pool) + pool.booting >= spec.max_nodes
        return at_max and pool.free_slots < 1 and self.n_waiting >= spec.max_queue

    def enqueue(self, sb: SimSandbox, now: float) -> None:
        self.queue.append(sb)
        self.n_waiting += 1
        if self._dispatch_timer is None:
            # placement happens just after the create returns, as on a real scheduler: a create
            # response always shows PENDING, and a burst of creates at one instant is placed in order
            self._dispatch_timer = self.clock.call_at(now, self._dispatch_soon)

    def leave(self, sb: SimSandbox, phase: int) -> None:
        """A sandbox in `phase` leaves the pipeline (ended or paused): out of the queue's count, or its slot back."""
        if phase == _QUEUED:
            self.n_waiting -= 1
            return
        if phase in (_PULLING, _BOOTING):
            self.n_provisioning -= 1
        if phase == _BOOTING:
            self.n_booting -= 1
        if sb.id in self._starting:
            self._starting.discard(sb.id)
            self._release_starts()
        node = self.pool.nodes.get(sb.node) if sb.node is not None else None
        if node is not None:
            used = node.in_use.get(sb.image, 0)
            if used > 1:
                node.in_use[sb.image] = used - 1
            else:
                node.in_use.pop(sb.image, None)
            self.pool.release_slot(node)
            self.autoscaler.maybe_idle(node)

    def refill(self) -> None:
        """A slot came free: place whoever waits for one."""
        if self.n_waiting > 0:
            self.dispatch()

    def close(self) -> None:
        """Cancel every pending placement, node arrival, scale-down and pull."""
        if self._dispatch_timer is not None:
            self._dispatch_timer.cancel()
        if self._start_timer is not None:
            self._start_timer.cancel()
        self.autoscaler.close()
        self.registry.close()
        for node in list(self.pool.nodes.values()):
            for pull in node.pulls.values():
                if pull.timer is not None:
                    pull.timer.cancel()

    def _dispatch_soon(self) -> None:
        self._dispatch_timer = None
        self.dispatch()

    def dispatch(self) -> None:
        """Place waiting sandboxes, oldest first, on free slots; ask for nodes when some must wait."""
        queue = self.queue
        pool = self.pool
        while self.n_waiting > 0 and pool.free_slots >= 1:
            sb = queue.popleft()
            if sb._phase != _QUEUED:
                continue  # ended while waiting
            node = pool.pick(sb.image)
            if node is None:  # pragma: no cover - free_slots says otherwise
                queue.appendleft(sb)
                break
            self.n_waiting -= 1
            self._place(sb, node)
        if self.n_waiting > 0:
            self.autoscaler.scale_up(self.n_waiting)
        elif queue:
            queue.clear()  # only sandboxes that ended while waiting are left in it

    def _place(self, sb: SimSandbox, node: Node) -> None:
        now = self.clock.now()
        self.pool.take_slot(node)
        if node.idle_timer is not None:
            node.idle_timer.cancel()
            node.idle_timer = None
        sb.node = node.id
        sb.status = SandboxStatus.PROVISIONING
        if sb.started_at is None:  # a resume keeps the first start (TTI is the create's)
            sb.started_at = now
        sb.updated_at = now
        self.n_provisioning += 1
        self.peak_provisioning = max(self.peak_provisioning, self.n_provisioning)
        node.in_use[sb.image] = node.in_use.get(sb.image, 0) + 1
        if sb._resuming or node.has_image(sb.image):
            if self.layers.sized:
                self._touch(node, self._image_layers.get(sb.image, ()))
            self._notify(sb)
            self._start_boot(sb)
            return
        sb._phase = _PULLING
        pull = node.pulls.get(sb.image)
        if pull is None:
            spec = self.profile.image
            draws = Stream(self.seed, "pull", sb.seq)
            layers = self._layers(sb) if self.layers.sized else ()
            if layers:  # by size: the layers the node lacks, over shared bandwidth
                pull = Pull(image=sb.image, ends_at=math.nan, fails=draws.chance(spec.pull_failure_prob))
                node.pulls[sb.image] = pull
                self.pool.index_image(node, sb.image)
                self._pull_layers(node, pull, layers)
            else:
                duration = draws.lognormal(spec.pull_median_s, spec.pull_sigma)
                pull = Pull(image=sb.image, ends_at=now + duration, fails=draws.chance(spec.pull_failure_prob))
                node.pulls[sb.image] = pull
                self.pool.index_image(node, sb.image)
                pull.timer = self.clock.call_at(pull.ends_at, lambda: self._pull_done(node, pull))
        pull.waiters.append(sb)
        self._notify(sb)

    def _layers(self, sb: SimSandbox) -> tuple[Layer, ...]:
        """The sandbox's image as layers (the create's declared size first), resolved once per image and size."""
        key = (sb.image, declared_size_mb(sb.labels))
        layers = self._layers_of.get(key)
        if layers is None:
            layers = self._layers_of[key] = self.layers.of(sb.image, sb.labels)
        if layers:
            self._image_layers[sb.image] = layers
        return layers

    def _pull_layers(self, node: Node, pull: Pull, layers: tuple[Layer, ...]) -> None:
        """Start moving the layers `node` lacks (joining a flow already moving one); done at once if none."""
        self._touch(node, layers)
        for name, mb in layers:
            if name in node.layers:
                continue
            pull.missing.add(name)
            if self.registry.moving(node.id, name) is None:
                self.registry.start(node.id, name, mb, functools.partial(self._layer_arrived, node, name, mb))
        if not pull.missing:
            pull.timer = self.clock.call_at(self.clock.now(), lambda: self._pull_done(node, pull))

    def _layer_arrived(self, node: Node, name: str, mb: float) -> None:
        """A layer reached the node: cached there, and every pull on the node waiting only for it is done."""
        if not node.alive:
            return
        node.layers[name] = mb
        for pull in list(node.pulls.values()):
            if name in pull.missing:
                pull.missing.discard(name)
                if not pull.missing:
                    self._pull_done(node, pull)
        self._evict(node)

    def _touch(self, node: Node, layers: tuple[Layer, ...]) -> None:
        """Layers just used move to the recent end of the node's cache (least recently used go first)."""
        for name, _ in layers:
            mb = node.layers.pop(name, None)
            if mb is not None:
                node.layers[name] = mb

    def _evict(self, node: Node) -> None:
        """Keep the node's cache within `[image] cache_mb`: drop the least recently used layers that no placed
        sandbox and no pull needs; an image that lost a layer must be pulled (in part) again."""
        cap = self.profile.image.cache_mb
        total = sum(node.layers.values())
        if total <= cap:
            return
        needed: set[str] = set()
        for image in (*node.in_use, *node.pulls):
            needed.update(name for name, _ in self._image_layers.get(image, ()))
        evicted: set[str] = set()
        for name in list(node.layers):
            if total <= cap:
                break
            if name not in needed:
                total -= node.layers.pop(name)
                evicted.add(name)
        if evicted:
            node.images = {
                image
                for image in node.images
                if not any(name in evicted for name, _ in self._image_layers.get(image, ()))
            }

    def _pull_done(self, node: Node, pull: Pull) -> None:
        node.pulls.pop(pull.image, None)
        now = self.clock.now()
        for sb in pull.waiters:
            if sb._phase == _PULLING and sb.started_at is not None:
                sb.pull_s = now - sb.started_at  # placed -> pulled (a pulling sandbox was placed for the first time)
        if pull.fails:
            for sb in pull.waiters:
                if sb._phase == _PULLING:
                    self._end(
                        sb,
                        SandboxStatus.ERROR,
                        ErrorType.IMAGE_PULL_FAILED,
                        f"Failed to pull image {sb.image!r}",
                    )
            return
        node.images.add(pull.image)
        self.pool.index_image(node, pull.image)
        for sb in pull.waiters:
            if sb._phase == _PULLING:
                self._start_boot(sb)

    def _start_boot(self, sb: SimSandbox) -> None:
        now = self.clock.now()
        sb._phase = _BOOTING
        self.n_booting += 1
        if sb._resuming or sb.fork_of is not None:  # boots in the profile's [sandbox] resume or fork time
            duration = self._special_boot(sb)
            draws = Stream(self.seed, "fork-boot", sb.seq)  # a fork's copy boots anew: it may crash as any boot
            if sb.fork_of is not None and draws.chance(self.profile.errors.boot_crash_prob):
                sb._timers.append(self.clock.call_at(now + draws.uniform() * duration, lambda: self._boot_crash(sb)))
            else:
                sb._timers.append(self.clock.call_at(now + duration, lambda: self._boot_done(sb)))
            return
        if self.profile.account is not None and not self._take_start(sb):
            self.start_waits += 1
            self._start_wait.append(sb)  # the pipeline is busy: boots when a start comes free
            return
        self._boot(sb, now)

    def _boot(self, sb: SimSandbox, now: float) -> None:
        spec = self.profile.boot
        n = self.n_booting
        congestion = max(1.0, n / spec.congestion_knee) ** spec.congestion_exponent
        draws = Stream(self.seed, "boot", sb.seq)
        load = min(spec.load_delay_s * max(n - 1, 0), spec.load_delay_max_s)
        duration = draws.lognormal(spec.median_s, spec.sigma) * congestion + load
        crashes = draws.chance(self.profile.errors.boot_crash_prob)
        crash_frac = draws.uniform()
        if crashes:
            sb._timers.append(self.clock.call_at(now + crash_frac * duration, lambda: self._boot_crash(sb)))
        else:
            sb._timers.append(self.clock.call_at(now + duration, lambda: self._boot_done(sb)))

    def _boot_done(self, sb: SimSandbox) -> None:
        if sb._phase != _BOOTING:
            return
        now = self.clock.now()
        sb._phase = _RUNNING
        sb.status = SandboxStatus.RUNNING
        if sb.running_at is None:
            sb.running_at = now
        sb._resuming = False
        sb.updated_at = now
        self.n_provisioning -= 1
        self.n_booting -= 1
        if sb.id in self._starting:
            self._starting.discard(sb.id)
            self._release_starts()
        self._notify(sb)

    def _take_start(self, sb: SimSandbox) -> bool:
        """Hold one of the pipeline's starts for `sb` if one is free now (a concurrency slot and a token)."""
        account = self.profile.account
        assert account is not None
        if len(self._starting) >= account.max_starting:
            return False
        if account.start_per_s != float("inf"):
            now = self.clock.now()
            self._start_tokens = min(
                account.start_burst, self._start_tokens + (now - self._start_tokens_at) * account.start_per_s
            )
            self._start_tokens_at = now
            if self._start_tokens < 1.0 - 1e-9:
                if self._start_timer is None:
                    wait = (1.0 - self._start_tokens) / account.start_per_s
                    self._start_timer = self.clock.call_at(now + wait, self._token_came)
                return False
            self._start_tokens -= 1.0
        self._starting.add(sb.id)
        return True

    def _token_came(self) -> None:
        self._start_timer = None
        self._release_starts()

    def _release_starts(self) -> None:
        """A start came free (a boot ended, a token arrived): boot whoever waits, oldest first."""
        while self._start_wait:
            sb = self._start_wait[0]
            if sb._phase != _BOOTING or sb.id in self._starting:
                self._start_wait.popleft()  # ended (or paused) while waiting
                continue
            if not self._take_start(sb):
                return
            self._start_wait.popleft()
            self._boot(sb, self.clock.now())

    def _boot_crash(self, sb: SimSandbox) -> None:
        if sb._phase == _BOOTING:
            self._end(
                sb,
                SandboxStatus.ERROR,
                ErrorType.BOOT_FAILED,
                "Sandbox failed to start: the container exited during boot",
            )
