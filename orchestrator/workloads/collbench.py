"""collbench: orch's own torch.distributed collective benchmark, printed the nccl-tests way.

    python -m orchestrator.workloads.collbench --collectives all_reduce,sendrecv --sizes 1K:1M:x4 \
        --warmup 2 --iters 5 --check [--backend gloo|nccl] [--timeout 300]

Rank and world come from RANK/WORLD_SIZE/LOCAL_RANK (torchrun, orch's local backend) or from
SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID (srun); MASTER_ADDR/MASTER_PORT always from the
environment. Backend gloo on CPU, nccl on CUDA GPUs (RCCL on ROCm), device cuda:LOCAL_RANK.

Sizes follow nccl-tests: the size column is max(send, recv) bytes of one rank; all_gather,
reduce_scatter and alltoall split it into nranks blocks rounded down to 16 bytes. Times are the
average over the timed iterations, and the maximum of that over ranks (nccl-tests' `-a 3`; its
default `-a 1` averages over ranks). Each rank also times every iteration (wall clock on CPU, CUDA
events on GPU, so no extra synchronisation); the slowest rank of each iteration is the latency of
that iteration, and each row carries their n, mean, p50, p95 and p99 (orchestrator.metrics.
percentiles hides p95 under 20 iterations and p99 under 100). Rank 0 prints, per collective, a
table in nccl-tests' layout (unchanged) followed by a `#orch-json <CollRow>` line per row.

Where torch has no native form of a placement, collbench emulates it with one local copy that is
part of the timed operation: out-of-place all_reduce and broadcast (copy send->recv, then the
in-place op), in-place alltoall and sendrecv (copy the buffer to a scratch tensor, then the
out-of-place op writes back into the buffer). reduce_scatter falls back to all_reduce on a copy
and keeping this rank's block when the backend lacks reduce_scatter (semantically a reduce-
scatter; it moves more bytes, so its busbw is understated; the header says so).

With `--channels N` (N > 1), a large all_reduce runs as N concurrent all_reduce calls on
disjoint slices of the buffer (each slice at least 4 MiB), the way NCCL spreads one call over
channels: gloo runs each call on one of the process group's worker threads. Out-of-place copies
each slice just before its call, so the copy overlaps the transfer of the slices before it. The
result is the same sum (--check verifies it). Default 1 (one call per op, as torch users call
it): on the 2-core lab the gain of 4 was real in some runs and absent in others (bench/fidelity.py
measures both), so it is not the default until a quiet machine shows it holds.

Exit status: 0; 1 when any #wrong > 0 (after printing everything); 2 on bad arguments or env.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.metrics.busbw import algbw_gbs, busbw_factor
from orchestrator.metrics.percentiles import summarize
from orchestrator.models.results import COLLECTIVES, Collective, CollRow, Layout, PlaceResult, layout
from orchestrator.plan import parse_sizes

ORCH_JSON_PREFIX = "#orch-json "
_DTYPE_SIZE = {"float": 4}
_REDOP: dict[Collective, str] = {
    "all_reduce": "sum",
    "reduce_scatter": "sum",
    "sendrecv": "sum",
    "all_gather": "none",
    "alltoall": "none",
    "broadcast": "none",
    "reduce": "sum",
}
_ROOT: dict[Collective, int] = {"broadcast": 0, "reduce": 0}
# Rank-dependent test values stay small integers, so float32 sums over many ranks are exact.
_PATTERN_MOD = 13
# Below this many bytes per slice, splitting a call costs more than the extra worker thread gains.
CHANNEL_MIN_BYTES = 4 << 20


class UsageError(Exception):
    """Bad arguments or environment (exit status 2)."""


@dataclass(frozen=True)
class Dist:
    """Where this process sits in the job."""

    rank: int
    world: int
    local_rank: int


def rank_env(env: dict[str, str] | os._Environ[str]) -> Dist:
    """Rank, world size and local rank from torchrun-style or Slurm env; raises UsageError."""
    if "RANK" in env and "WORLD_SIZE" in env:
        keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        keys = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
    else:
        raise UsageError("set RANK/WORLD_SIZE (torchrun, orch local) or run under srun (SLURM_PROCID)")
    try:
        rank, world = int(env[keys[0]]), int(env[keys[1]])
        local = int(env.get(keys[2], "0"))
    except ValueError as e:
        raise UsageError(f"bad rank variables: {e}") from e
    if not (0 <= rank < world):
        raise UsageError(f"{keys[0]}={rank} is outside 0..{world - 1}")
    for key in ("MASTER_ADDR", "MASTER_PORT"):
        if not env.get(key):
            raise UsageError(f"{key} is not set")
    return Dist(rank=rank, world=world, local_rank=local)


def channel_slices(count: int, elt: int, channels: int, min_bytes: int = CHANNEL_MIN_BYTES) -> list[slice]:
    """Split `count` elements into at most `channels` contiguous slices of >= min_bytes each."""
    k = max(1, min(channels, count * elt // max(1, min_bytes)))
    if count == 0 or k == 1:
        return [slice(0, count)]
    step = -(-count // k)
    return [slice(i, min(i + step, count)) for i in range(0, count, step)]


def fmt_float(value: float, width: int) -> str:
    """A number in `width` characters: 2 decimals, then fewer, then exponent (nccl-tests' way)."""
    for spec in (f"{width}.2f", f"{width}.1f", f"{width}.0f"):
        s = format(value, spec)
        if len(s) <= width:
            return s
    return format(value, f"{width}.1e" if width >= 7 else f"{width}.0e")


def format_place(p: PlaceResult) -> str:
    """The four columns of one placement (time, algbw, busbw, #wrong)."""
    wrong = f"{p.wrong:6g}" if p.wrong is not None else "   N/A"
    return f"  {fmt_float(p.time_us, 7)}  {fmt_float(p.algbw_gbs, 6)}  {fmt_float(p.busbw_gbs, 6)}  {wrong}"


def format_row(row: CollRow) -> str:
    """One data line of the table."""
    redop = row.redop or "none"
    root = -1 if row.root is None else row.root
    line = f"{row.size_bytes:12d}  {row.count:12d}  {row.dtype:>8s}  {redop:>6s}  {root:6d}"
    line += format_place(row.out_of_place)
    if row.in_place is not None:
        line += format_place(row.in_place)
    return line


_LEFT = "# {:>10s}  {:>12s}  {:>8s}  {:>6s}  {:>6s}"
_PLACE = "  {:>7s}  {:>6s}  {:>6s}  {:>6s}"


def table_header() -> list[str]:
    """The column-header lines of nccl-tests' newer layout (with the '#' line before)."""
    blank = _LEFT.format("", "", "", "", "")
    names = _LEFT.format("size", "count", "type", "redop", "root")
    names += (_PLACE * 2).format("time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
    units = _LEFT.format("(B)", "(elements)", "", "", "")
    units += (_PLACE * 2).format("(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
    title = blank + "           out-of-place                       in-place          "
    return ["#", title, names + " ", units + " "]


def table_footer(rows: list[CollRow], program: str) -> list[str]:
    """Out-of-bounds count (placements with #wrong > 0) and average busbw, as nccl-tests ends."""
    places = [p for r in rows for p in (r.out_of_place, r.in_place) if p is not None]
    errors = sum(1 for p in places if p.wrong)
    avg = sum(p.busbw_gbs for p in places) / len(places) if places else 0.0
    return [
        "# {:<20s} : {:d} {}".format("Out of bounds values", errors, "FAILED" if errors else "OK"),
        "# {:<20s} : {:g} ".format("Avg bus bandwidth", avg),
        "#",
        f"# Collective test concluded: {program}",
    ]


def make_row(
    collective: Collective,
    lay: Layout,
    dtype: str,
    nranks: int,
    times_us: dict[str, float],
    wrong: dict[str, int | None],
    iter_us: dict[str, list[float]] | None = None,
) -> CollRow:
    """A CollRow from measured times (µs), #wrong and, when given, the per-iteration times (µs)
    per placement ('out', 'in')."""

    def place(key: str) -> PlaceResult:
        alg = algbw_gbs(lay.size_bytes, times_us[key])
        its = (iter_us or {}).get(key)
        return PlaceResult(
            time_us=times_us[key],
            algbw_gbs=alg,
            busbw_gbs=alg * busbw_factor(collective, nranks),
            wrong=wrong[key],
            latency_us=summarize(its) if its else None,
        )

    redop = _REDOP[collective]
    return CollRow(
        collective=collective, size_bytes=lay.size_bytes, count=lay.count, dtype=dtype,
        redop=None if redop == "none" else redop, root=_ROOT.get(collective), nranks=nranks,
        out_of_place=place("out"), in_place=place("in") if "in" in times_us else None,
    )  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line arguments; raises SystemExit(2) on bad ones (argparse)."""
    p = argparse.ArgumentParser(prog="collbench", description=__doc__.split("\n")[0] if __doc__ else "")
    p.add_argument("--collectives", default=",".join(COLLECTIVES), help="comma list (default: all six)")
    p.add_argument("--sizes", default="8:1M:x2", help="MIN:MAX[:xF] or one size; K/M/G are binary")
    p.add_argument("--warmup", type=int, default=5, help="warm-up iterations per row and placement")
    p.add_argument("--iters", type=int, default=20, help="timed iterations per row and placement")
    p.add_argument("--check", action="store_true", help="verify results; count #wrong")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    p.add_argument("--dtype", choices=tuple(_DTYPE_SIZE), default="float")
    p.add_argument("--timeout", type=float, default=300.0, help="process-group timeout, seconds")
    p.add_argument(
        "--channels", type=int, default=1,
        help="concurrent calls one large all_reduce is split into (default 1: one call)",
    )  # fmt: skip
    p.add_argument(
        "--socket-ifname", default=None,
        help="sets GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME unless set); default: leave env as is",
    )  # fmt: skip
    # Test-only: perturb one element of the last rank's result after each checked op, to prove
    # that #wrong counting works. Never use it for measurements.
    p.add_argument("--inject-wrong", action="store_true", help=argparse.SUPPRESS)
    # Test-only: force the reduce_scatter fallback (all_reduce + keep own block).
    p.add_argument("--rs-fallback", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.warmup < 0 or args.iters < 1 or args.timeout <= 0 or args.channels < 1:
        p.error("--warmup >= 0, --iters >= 1, --timeout > 0 and --channels >= 1 are required")
    names = [c.strip() for c in args.collectives.split(",") if c.strip()]
    bad = [c for c in names if c not in COLLECTIVES]
    if bad or not names:
        p.error(f"--collectives: unknown {bad or '(none)'}; choose from {','.join(COLLECTIVES)}")
    args.collective_list = [c for c in COLLECTIVES if c in names]
    try:
        args.size_list = parse_sizes(args.sizes).values()
    except ConfigError as e:
        p.error(str(e))
    return args


def container_engine(root: Path = Path("/")) -> str:
    """The container engine this process runs in, from the file each puts in its containers:
    podman's /run/.containerenv, docker's /.dockerenv; 'none' outside a container."""
    if (root / "run" / ".containerenv").exists():
        return "podman"
    if (root / ".dockerenv").exists():
        return "docker"
    return "none"


def container_line(engines: list[str]) -> str:
    """``# Container: podman (4 of 4 ranks)``, or ``# Container: none``: where the ranks ran."""
    inside = [e for e in engines if e != "none"]
    if not inside:
        return "# Container: none"
    kinds = ",".join(sorted(set(inside)))
    return f"# Container: {kinds} ({len(inside)} of {len(engines)} ranks)"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    args = parse_args(argv)
    try:
        dist_info = rank_env(os.environ)
    except UsageError as e:
        print(f"collbench: {e}", file=sys.stderr)
        return 2
    if args.socket_ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = args.socket_ifname
        os.environ.setdefault("NCCL_SOCKET_IFNAME", args.socket_ifname)
    return _Bench(args, dist_info).run()


class _Bench:
    """The benchmark proper; torch is imported here only, so orch imports without it."""

    def __init__(self, args: argparse.Namespace, d: Dist) -> None:
        warnings.filterwarnings("ignore", message=".*Failed to initialize NumPy.*")
        warnings.filterwarnings("ignore", category=FutureWarning, module="torch")
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.args, self.d = torch, dist, args, d
        backend = args.backend
        if backend == "auto":
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        self.backend = backend
        self.channels = int(args.channels)
        if backend == "nccl":
            torch.cuda.set_device(d.local_rank)
            self.device = torch.device(f"cuda:{d.local_rank}")
        else:
            self.device = torch.device("cpu")
        self.dtype = {"float": torch.float32}[args.dtype]
        self.elt = _DTYPE_SIZE[args.dtype]
        self.rs_fallback = bool(args.rs_fallback)
        self.out = sys.stdout

    # -- plumbing -------------------------------------------------------------------------------

    def emit(self, line: str) -> None:
        if self.d.rank == 0:
            self.out.write(line + "\n")
            self.out.flush()

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        if self.device.type == "cuda":
            self.dist.barrier(device_ids=[self.d.local_rank])
        else:
            self.dist.barrier()

    def allreduce_scalar(self, value: float, op: Any) -> float:
        t = self.torch.tensor([value], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=op)
        return float(t.item())

    def gather_text(self, text: str, width: int = 512) -> list[str]:
        """Every rank's short text, in rank order (all_gather_object needs numpy; this does not)."""
        torch = self.torch
        data = text.encode()[:width].ljust(width, b" ")
        mine = torch.tensor(list(data), dtype=torch.uint8, device=self.device)
        parts = [torch.zeros(width, dtype=torch.uint8, device=self.device) for _ in range(self.d.world)]
        self.dist.all_gather(parts, mine)
        return [bytes(p.cpu().tolist()).decode(errors="replace").strip() for p in parts]

    def pattern(self, rank: int, n: int, offset: int = 0) -> Any:
        """Rank-dependent values: (rank+1) + (i % 13) for element i (small integers)."""
        i = self.torch.arange(offset, offset + n, device=self.device, dtype=self.torch.int64)
        return ((i % _PATTERN_MOD) + (rank + 1)).to(self.dtype)

    # -- the collectives ------------------------------------------------------------------------

    def ops(self, c: Collective, lay: Layout) -> dict[str, tuple[Callable[[], object], Callable[[], Any]]]:
        """Per placement: (prepare-and-run closure, result getter) over fresh buffers."""
        torch, dist, r, n = self.torch, self.dist, self.d.rank, self.d.world

        def mk(k: int) -> Any:
            return torch.zeros(k, dtype=self.dtype, device=self.device)

        send, recv, buf = mk(lay.send), mk(lay.recv), mk(max(lay.send, lay.recv))
        scratch = mk(max(lay.send, lay.recv))
        self.buffers = {"send": send, "recv": recv, "buf": buf}
        base = lay.count
        ag: Callable[[Any, Any], object] = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
        rs: Callable[[Any, Any], object] = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
        nxt, prv = (r + 1) % n, (r - 1 + n) % n

        def reduce_scatter(out: Any, inp: Any) -> None:
            if not self.rs_fallback:
                try:
                    rs(out, inp)
                    return
                except (RuntimeError, NotImplementedError, ValueError):
                    self.rs_fallback = True
                    self.emit(f"# reduce_scatter: backend {self.backend} lacks it; fallback in use")
            scratch[: inp.numel()].copy_(inp)
            dist.all_reduce(scratch[: inp.numel()])
            out.copy_(scratch[r * base : (r + 1) * base])

        def sendrecv(out: Any, inp: Any) -> object:
            if n == 1:
                return out.copy_(inp)
            reqs = dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, inp, nxt), dist.P2POp(dist.irecv, out, prv)]
            )
            for q in reqs:
                q.wait()
            return out

        def broadcast_out() -> None:
            if r == 0:
                recv.copy_(send)
            dist.broadcast(recv, src=0)

        slices = channel_slices(lay.count, self.elt, self.channels) if c == "all_reduce" else []

        def all_reduce_out() -> None:
            if len(slices) == 1:
                recv.copy_(send)
                dist.all_reduce(recv)
                return
            works = []
            for sl in slices:
                recv[sl].copy_(send[sl])
                works.append(dist.all_reduce(recv[sl], async_op=True))
            for w in works:
                w.wait()

        def all_reduce_in() -> None:
            if len(slices) == 1:
                dist.all_reduce(buf)
                return
            for w in [dist.all_reduce(buf[sl], async_op=True) for sl in slices]:
                w.wait()

        mine = slice(r * base, (r + 1) * base)
        table: dict[Collective, dict[str, tuple[Callable[[], object], Callable[[], Any]]]] = {
            "all_reduce": {
                "out": (all_reduce_out, lambda: recv),
                "in": (all_reduce_in, lambda: buf),
            },
            "all_gather": {
                "out": (lambda: ag(recv, send), lambda: recv),
                "in": (lambda: ag(buf, buf[mine]), lambda: buf),
            },
            "reduce_scatter": {
                "out": (lambda: reduce_scatter(recv, send), lambda: recv),
                "in": (lambda: reduce_scatter(buf[mine], buf), lambda: buf[mine]),
            },
            "alltoall": {
                "out": (lambda: dist.all_to_all_single(recv, send), lambda: recv),
                "in": (lambda: (scratch.copy_(buf), dist.all_to_all_single(buf, scratch)), lambda: buf),
            },
            "broadcast": {
                "out": (broadcast_out, lambda: recv),
                "in": (lambda: dist.broadcast(buf, src=0), lambda: buf),
            },
            "sendrecv": {
                "out": (lambda: sendrecv(recv, send), lambda: recv),
                "in": (lambda: (scratch.copy_(buf), sendrecv(buf, scratch)), lambda: buf),
            },
        }
        return table[c]

    def fill(self, c: Collective, place: str, lay: Layout) -> None:
        """Put rank-dependent inputs where the placement reads them."""
        r, base = self.d.rank, lay.count
        b = self.buffers
        if place == "out":
            b["send"].copy_(self.pattern(r, lay.send))
            b["recv"].zero_()
            return
        buf = b["buf"]
        buf.zero_()
        if c == "all_gather":
            buf[r * base : (r + 1) * base].copy_(self.pattern(r, base))
        else:
            buf[: lay.send].copy_(self.pattern(r, lay.send))

    def expected(self, c: Collective, lay: Layout) -> Any:
        """What every rank's result must be after one op on freshly filled inputs."""
        n, r, base = self.d.world, self.d.rank, lay.count
        if c == "all_reduce":
            return sum(self.pattern(k, lay.count) for k in range(n))
        if c == "all_gather":
            return self.torch.cat([self.pattern(k, base) for k in range(n)]) if base else self.pattern(0, 0)
        if c == "reduce_scatter":
            return sum(self.pattern(k, base, offset=r * base) for k in range(n))
        if c == "alltoall":
            # block k of my result is block r of rank k's input
            parts = [self.pattern(k, base, offset=r * base) for k in range(n)]
            return self.torch.cat(parts) if base else self.pattern(0, 0)
        if c == "broadcast":
            return self.pattern(0, lay.count)
        if c == "sendrecv":
            return self.pattern((r - 1 + n) % n, lay.count)
        raise AssertionError(c)

    # -- measurement ----------------------------------------------------------------------------

    def time_op(self, op: Callable[[], object]) -> tuple[float, list[float]]:
        """Average µs per op over the timed iterations (max over ranks), and each iteration's µs
        (max over ranks: the iteration ends for the job when its slowest rank is done)."""
        torch, iters = self.torch, self.args.iters
        for _ in range(self.args.warmup):
            op()
        self.sync()
        self.barrier()
        cuda = self.device.type == "cuda"
        events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)] if cuda else []
        marks: list[float] = []
        t0 = time.perf_counter()
        if cuda:
            events[0].record()
        for i in range(iters):
            op()
            if cuda:
                events[i + 1].record()
            else:
                marks.append(time.perf_counter())
        self.sync()
        local = (time.perf_counter() - t0) / iters * 1e6
        if cuda:
            each = [events[i].elapsed_time(events[i + 1]) * 1e3 for i in range(iters)]  # ms -> µs
        else:
            each = [(b - a) * 1e6 for a, b in zip([t0, *marks[:-1]], marks, strict=True)]
        per_iter = torch.tensor(each, dtype=torch.float64, device=self.device)
        self.dist.all_reduce(per_iter, op=self.dist.ReduceOp.MAX)
        return self.allreduce_scalar(local, self.dist.ReduceOp.MAX), [float(v) for v in per_iter.tolist()]

    def check(
        self, c: Collective, place: str, lay: Layout, op: Callable[[], object], get: Callable[[], Any]
    ) -> int:
        """Run once on fresh inputs and count wrong elements over all ranks."""
        self.fill(c, place, lay)
        self.sync()
        op()
        self.sync()
        result = get()
        if self.args.inject_wrong and self.d.rank == self.d.world - 1 and result.numel() > 0:
            result.view(-1)[0] += 1.0
        want = self.expected(c, lay)
        wrong = int((result != want).sum().item())
        return int(self.allreduce_scalar(float(wrong), self.dist.ReduceOp.SUM))

    def run_collective(self, c: Collective) -> list[CollRow]:
        program = f"{c}_perf"
        n = self.d.world
        self.emit(f"# Collective test starting: {program} (orch collbench)")
        lo, hi = self.args.size_list[0], self.args.size_list[-1]
        factor = self.args.size_list[1] // lo if len(self.args.size_list) > 1 and lo else 1
        self.emit(
            f"# nThread 1 nGpus 1 minBytes {lo} maxBytes {hi} step: {factor}(factor) "
            f"warmup iters: {self.args.warmup} iters: {self.args.iters} agg iters: 1 "
            f"validation: {int(self.args.check)} graph: 0 unalign: 0"
        )
        if c == "reduce_scatter" and self.rs_fallback:
            self.emit("# reduce_scatter: emulated by all_reduce + own block (busbw understated)")
        if c == "all_reduce" and self.channels > 1:
            self.emit(
                f"# all_reduce: messages of {2 * CHANNEL_MIN_BYTES >> 20} MiB and more run as up to "
                f"{self.channels} concurrent calls on disjoint slices (--channels)"
            )
        for line in table_header():
            self.emit(line)
        rows: list[CollRow] = []
        for size in self.args.size_list:
            lay = layout(c, size, self.elt, n)
            ops = self.ops(c, lay)
            times: dict[str, float] = {}
            iter_us: dict[str, list[float]] = {}
            wrong: dict[str, int | None] = {}
            for place, (op, get) in ops.items():
                times[place], iter_us[place] = self.time_op(op)  # on zeroed buffers: no overflow
                wrong[place] = self.check(c, place, lay, op, get) if self.args.check else None
            row = make_row(c, lay, self.args.dtype, n, times, wrong, iter_us)
            rows.append(row)
            self.emit(format_row(row))
            self.emit(ORCH_JSON_PREFIX + row.model_dump_json())
        for line in table_footer(rows, program):
            self.emit(line)
        self.emit("")
        return rows

    def run(self) -> int:
        dist, d = self.dist, self.d
        kwargs: dict[str, Any] = {}
        if self.device.type == "cuda":
            kwargs["device_id"] = self.device
        dist.init_process_group(
            self.backend, init_method="env://", rank=d.rank, world_size=d.world,
            timeout=timedelta(seconds=self.args.timeout), **kwargs,
        )  # fmt: skip
        try:
            self.emit(
                f"# collbench (orch) torch {self.torch.__version__} backend {self.backend} "
                f"nranks {d.world} dtype {self.args.dtype}"
            )
            self._device_report()
            total_wrong = 0
            for c in self.args.collective_list:
                rows = self.run_collective(c)
                total_wrong += sum(
                    p.wrong or 0 for r in rows for p in (r.out_of_place, r.in_place) if p is not None
                )
            self.barrier()
        finally:
            dist.destroy_process_group()
        return 1 if total_wrong else 0

    def _device_report(self) -> None:
        info = json.dumps(
            {
                "rank": self.d.rank, "host": socket.gethostname(), "pid": os.getpid(),
                "local": self.d.local_rank, "device": str(self.device), "container": container_engine(),
            }
        )  # fmt: skip
        self.emit("# Using devices")
        engines: list[str] = []
        for raw in self.gather_text(info):
            g = json.loads(raw)
            engines.append(str(g["container"]))
            self.emit(
                f"#  Rank {g['rank']:2d} Group  0 Pid {g['pid']:6d} on {g['host']:>10s} "
                f"device {g['local']:2d} [{g['device']}] "
                f"{self.backend}"
            )
        self.emit(container_line(engines))


if __name__ == "__main__":
    sys.exit(main())
