"""The "HLO Roofline" plugin under load and faults, against a real `tensorboard --logdir`.

One TensorBoard (free loopback port, tmp logdir) serves the whole module; the first test hits it
cold, so first-use races (imports, the chip database, the report cache) are exercised too. Request
counts are bounded: the file takes seconds, not minutes.
"""

from __future__ import annotations

import csv
import functools
import gzip
import http.client
import io
import itertools
import json
import os
import re
import threading
import time
import tomllib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from tb_helpers import (
    HOSTILE,
    agreeing,
    big_report,
    fixture_report,
    hostile_report,
    rows_of,
    write_corrupt,
)

from hlo_roofline import Report
from hlo_roofline.report import CSV_MAGIC
from hlo_roofline_tensorboard import _data
from hlo_roofline_tensorboard import plugin as tb_plugin

PREFIX = "/data/plugin/hlo_roofline"
SENTINEL = "SENTINEL-7f3a9c-outside-the-logdir"  # content of files outside the logdir
# Healthy runs: name -> op count (distinct, so a response for the wrong run is caught).
RUNS = {"alpha": 7, "beta/one": 11, "beta/two": 13, "gamma/x/y": 17}
BIG_OPS = 20_000
EVIL_RUN = f"evil/{HOSTILE}"  # a run whose *name* is hostile (the "/" in it nests directories)
RW_RUN = "rw"
# The rewritten run's versions: module -> op count. v1 and v2 are written atomically by
# Report.write_tensorboard, v3 in place by a "foreign" writer (truncate, then write in two parts).
RW_VERSIONS = {"rw_v1": 9, "rw_v2": 18, "rw_v3": 27}
CORRUPT = ("garbage", "empty", "truncated", "schema", "summary", "version", "not_object", "deep")
WORKERS = 24


# -- reports -------------------------------------------------------------------------------------


@functools.cache
def _base() -> Report:
    return fixture_report("mlp_bf16", "tpu_v5e", "v5e")


def module_of(run: str) -> str:
    return "load_" + re.sub(r"\W", "_", run)


def tagged_report(n: int, module: str) -> Report:
    """The first ``n`` ops of a real report, each op_name prefixed with ``module/``."""
    base = _base()
    ops = base.ops.iloc[:n].reset_index(drop=True)
    ops = ops.assign(op_name=[f"{module}/{i}" for i in range(n)])
    return agreeing(ops, base, module)


def write_corrupt_runs(logdir: Path) -> None:
    """One run per way a report.json can be broken (see CORRUPT)."""
    good = tagged_report(5, "good").to_dict()
    files = {
        "garbage": bytes(range(256)) * 8,  # not even UTF-8
        "empty": b"",
        "schema": json.dumps({**good, "columns": ["name"], "data": [["x"]]}).encode(),
        "summary": json.dumps({**good, "summary": [1, 2]}).encode(),
        "version": json.dumps({**good, "version": 999}).encode(),
        "not_object": b"[1, 2, 3]",
        "deep": b"[" * 100_000 + b"]" * 100_000,
    }
    for name, content in files.items():
        directory = logdir / "bad" / name / "plugins" / "hlo_roofline"
        directory.mkdir(parents=True)
        (directory / "report.json").write_bytes(content)
    write_corrupt(logdir, "bad/truncated")


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory) -> Path:
    """``<base>/logdir`` is served; ``<base>`` also holds what must never be served."""
    base = tmp_path_factory.mktemp("load")
    logdir = base / "logdir"
    for run, n in RUNS.items():
        tagged_report(n, module_of(run)).write_tensorboard(logdir, run)
    big = big_report(BIG_OPS)
    big.ops["op_name"] = [f"big/{i}" for i in range(BIG_OPS)]
    big.write_tensorboard(logdir, "big")
    hostile_report().write_tensorboard(logdir, "hostile")
    tagged_report(3, "evil").write_tensorboard(logdir, EVIL_RUN)
    tagged_report(RW_VERSIONS["rw_v1"], "rw_v1").write_tensorboard(logdir, RW_RUN)
    write_corrupt_runs(logdir)

    # Outside the logdir: a secret file and a complete run, reachable only by escaping.
    (base / "secret.txt").write_text(SENTINEL + "\n")
    outside = tagged_report(5, SENTINEL).write_tensorboard(base, "outside")
    (outside / "secret.txt").write_text(SENTINEL + "\n")
    os.symlink(base / "outside", logdir / "dirlink")  # not walked, refused by name
    linked = logdir / "filelink" / "plugins" / "hlo_roofline"
    linked.mkdir(parents=True)
    os.symlink(outside / "report.json", linked / "report.json")
    csv_linked = tagged_report(4, "csvlink").write_tensorboard(logdir, "csvlink")
    (csv_linked / "report.csv").unlink()
    os.symlink(base / "secret.txt", csv_linked / "report.csv")
    return base


@pytest.fixture(scope="module")
def logdir(base_dir) -> Path:
    return base_dir / "logdir"


def all_runs() -> list[str]:
    """What /runs must list (file links are listed: the walk sees a report.json, not its target)."""
    extra = ["big", "hostile", EVIL_RUN, RW_RUN, "filelink", "csvlink"]
    return sorted([*RUNS, *extra, *(f"bad/{c}" for c in CORRUPT)])


# -- HTTP ----------------------------------------------------------------------------------------


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self):
        """JSON as a browser parses it: NaN/Infinity tokens are errors."""

        def reject(token):
            raise ValueError(f"non-JSON token {token}")

        return json.loads(self.body, parse_constant=reject)

    def __repr__(self) -> str:
        return f"<{self.status} {self.headers.get('content-type')} {self.text[:200]!r}>"


def get(server: str, target: str, headers: dict[str, str] | None = None) -> Response:
    """GET ``target`` (sent byte for byte: no quoting, no path normalization)."""
    url = urlsplit(server)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        conn.request("GET", target, headers=headers or {})
        r = conn.getresponse()
        body = r.read()
        return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, body)
    finally:
        conn.close()


def route(name: str, run: str, chip: str | None = None, **params: str) -> str:
    query = f"run={quote(run, safe='')}" + (f"&chip={quote(chip)}" if chip else "")
    query += "".join(f"&{k}={quote(v, safe='')}" for k, v in params.items())
    return f"{PREFIX}/{name}?{query}"


Check = Callable[[Response], str | None]  # None if the response is right, else what is wrong


def hammer(server: str, jobs: list[tuple[str, Check]], workers: int = WORKERS) -> list[str]:
    """Issue every request concurrently; the failures, each with its request."""

    def one(job: tuple[str, Check]) -> str | None:
        target, check = job
        try:
            r = get(server, target)
            problem = check(r)
        except Exception as exc:  # a refused or dropped connection is a failure too
            return f"{target[:200]}: {type(exc).__name__}: {exc}"
        return f"{target[:200]}: {problem}: {r!r}" if problem else None

    with ThreadPoolExecutor(workers) as pool:
        return [f for f in pool.map(one, jobs) if f]


# -- checks --------------------------------------------------------------------------------------


def report_problem(r: Response, modules: dict[str, int], chip: str | None = None) -> str | None:
    """None if ``r`` is one complete report of ``modules`` (module -> op count), judged on chip."""
    if r.status != 200 or not r.headers.get("content-type", "").startswith("application/json"):
        return "not a 200 JSON response"
    body = r.json()
    n = modules.get(body.get("module"))
    if n is None:
        return f"module {body.get('module')!r} is not one of {sorted(modules)}"
    rows = rows_of(body)
    if len(rows) != n or any(len(row) != len(body["columns"]) for row in rows):
        return f"{len(rows)} rows, expected {n} of {len(body['columns'])} columns"
    op_name = body["columns"].index("op_name")
    if any(not row[op_name].startswith(body["module"] + "/") for row in rows):
        return "rows of another report mixed in"
    if body["summary"].get("chip") != (chip or "v5e"):
        return f"judged on {body['summary'].get('chip')}, asked for {chip}"
    return None


def csv_problem(r: Response, modules: dict[str, int], chip: str | None = None) -> str | None:
    """None if ``r`` is one complete CSV of ``modules`` (the written file, or made for ``chip``)."""
    if r.status != 200 or not r.headers.get("content-type", "").startswith("text/csv"):
        return "not a 200 CSV response"
    if not r.headers.get("content-disposition", "").startswith("attachment; filename="):
        return "not an attachment"
    # A plain CSV (pandas reads it as it is): the report's columns, then its rows.
    if r.text.startswith(CSV_MAGIC) or not r.text.startswith("name,"):
        return "not a plain CSV with the report's columns"
    rows = list(csv.DictReader(io.StringIO(r.text)))
    module = rows[0]["op_name"].split("/")[0] if rows else None
    if module not in modules or len(rows) != modules[module]:
        return f"{len(rows)} rows of {module!r}, expected one of {modules}"
    if any(row["op_name"].split("/")[0] != module for row in rows):
        return "rows of another report mixed in"
    if chip is not None and any(row["bound"] == "" for row in rows if float(row["flops"]) > 0):
        return "not re-classified"
    return None


def error_problem(r: Response, codes: tuple[int, ...]) -> str | None:
    """None if ``r`` is a clean JSON error (one of ``codes``): no traceback, no HTML, no paths."""
    if r.status not in codes:
        return f"status {r.status}, expected one of {codes}"
    if not r.headers.get("content-type", "").startswith("application/json"):
        return "error is not JSON"
    body = r.json()
    if not isinstance(body, dict) or not isinstance(body.get("error"), str) or not body["error"]:
        return "no error message"
    if "Traceback" in r.text or "<html" in r.text.lower():
        return "traceback or HTML leaked"
    if SENTINEL in r.text:
        return "content from outside the logdir"
    return None


def no_leak(r: Response) -> str | None:
    """None if ``r`` shows nothing from outside the logdir or the server's own source."""
    for marker in (SENTINEL, "root:x:0:0", "def get_plugin_apps", "import tensorboard"):
        if marker in r.text:
            return f"leaked {marker!r}"
    return None


def one_of(run: str) -> dict[str, int]:
    return {module_of(run): RUNS[run]}


def canonical(chip: str | None) -> str | None:
    return {"TPU v5e": "v5e"}.get(chip, chip) if chip else None


def run_jobs(run: str, chip: str | None) -> list[tuple[str, Check]]:
    """A report and a CSV request for a healthy run, with their checks."""
    return [
        (route("report", run, chip), lambda r: report_problem(r, one_of(run), canonical(chip))),
        (route("csv", run, chip), lambda r: csv_problem(r, one_of(run), chip)),
    ]


# -- 1. many concurrent requests -----------------------------------------------------------------


def test_concurrent_mixed_requests_answer_each_their_own_run(server):
    """300+ requests from 24 threads, the first ones on a cold server: all right, no cross-talk."""
    from hlo_roofline import chips

    def runs_check(r: Response) -> str | None:
        return None if r.status == 200 and r.json() == all_runs() else "wrong run list"

    # The server's database: the shipped table (this process may hold chips other tests added).
    shipped = list(tomllib.loads(chips.DATA_FILE.read_text())["chips"])

    def chips_check(r: Response) -> str | None:
        ok = r.status == 200 and [c["key"] for c in r.json()] == shipped
        return None if ok else "wrong chip list"

    def static_check(name: str) -> Check:
        expected, kind = (tb_plugin.STATIC_DIR / name).read_bytes(), tb_plugin.STATIC_FILES[name]
        return lambda r: (
            None
            if r.status == 200 and r.headers["content-type"].startswith(kind) and r.body == expected
            else "wrong static file"
        )

    def compare_check(run: str, other: str) -> Check:
        def check(r: Response) -> str | None:
            if r.status != 200:
                return "not 200"
            s = r.json()["summary"]
            got = {s["run"]["module"]: s["run"]["ops"], s["other"]["module"]: s["other"]["ops"]}
            return None if got == {**one_of(run), **one_of(other)} else "wrong runs compared"

        return check

    names = list(RUNS)
    chip_cycle = itertools.cycle([None, "v5p", "h100-sxm", "TPU v5e", "v5p"])
    jobs: list[tuple[str, Check]] = []
    for i in range(15):
        for run in names:
            jobs += run_jobs(run, next(chip_cycle)) + run_jobs(run, next(chip_cycle))[:1]
        run, other = names[i % len(names)], names[(i + 1) % len(names)]
        jobs.append((route("compare", run, other=other), compare_check(run, other)))
        jobs += [(f"{PREFIX}/runs", runs_check), (f"{PREFIX}/chips", chips_check)]
        jobs += [(f"{PREFIX}/{name}", static_check(name)) for name in tb_plugin.STATIC_FILES]
    assert len(jobs) >= 300  # one more per static file
    failures = hammer(server, jobs)
    assert not failures, f"{len(failures)} of {len(jobs)} failed:\n" + "\n".join(failures[:8])


# -- 2. a 20k-op report under concurrency --------------------------------------------------------


def test_big_report_served_whole_to_concurrent_readers(server, logdir):
    """14 requests for the 20k-op report (cold: one parse serves them all) among small ones."""
    path = logdir / "big" / "plugins" / "hlo_roofline" / "report.json"
    size = path.stat().st_size
    written = json.loads(path.read_text())
    bodies: list[bytes] = []

    def big_check(chip: str | None = None, zipped: bool = False) -> Check:
        def check(r: Response) -> str | None:
            body = gzip.decompress(r.body) if zipped else r.body
            if zipped and (r.headers.get("content-encoding") != "gzip" or len(r.body) > size / 3):
                return "not gzipped"
            # whole: about the file's size (a re-judged one sends its floats as base64 doubles,
            # 10.7 characters each where the file may write "0.0")
            if not size / 2 < len(body) < size * (1.1 if chip is None else 1.5):
                return f"{len(body)} bytes for a {size}-byte report"
            problem = report_problem(Response(r.status, r.headers, body), {"big": BIG_OPS}, chip)
            if problem is None and chip is None:
                bodies.append(body)
            return problem

        return check

    jobs: list[tuple[str, Check]] = [(route("report", "big"), big_check()) for _ in range(8)]
    jobs += [(route("report", "big", "v5p"), big_check("v5p")) for _ in range(2)]
    jobs += [(route("csv", "big"), lambda r: None if r.status == 200 else "not 200")] * 2
    small = [job for run in RUNS for job in run_jobs(run, None)]
    jobs = [job for pair in itertools.zip_longest(jobs, small * 2) for job in pair if job]
    failures = hammer(server, jobs, workers=16)
    gzipped = get(server, route("report", "big"), {"Accept-Encoding": "gzip"})
    failures += [f"gzip: {p}" for p in [big_check(zipped=True)(gzipped)] if p]
    assert not failures, "\n".join(failures[:8])
    assert len(set(bodies)) == 1, "the same report answered differently"
    served, n = json.loads(bodies[0]), len(written["columns"])
    assert served["columns"][:n] == written["columns"]  # then the tab's scope and user_function
    assert [row[:n] for row in served["data"]] == written["data"]


def test_concurrent_loads_of_one_report_parse_it_once(tmp_path, monkeypatch):
    """In process: 8 threads asking for one uncached report share a single parse."""
    run_dir = tagged_report(5, "once").write_tensorboard(tmp_path, "r")
    calls: list[str] = []
    real_read = Report.read

    def slow_read(path, **options) -> Report:
        calls.append(str(path))
        time.sleep(0.3)  # long enough for every thread to arrive while the first one parses
        return real_read(path, **options)

    monkeypatch.setattr(Report, "read", slow_read)
    with ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(lambda _: _data.report_json(str(run_dir), "v5p"), range(8)))
    assert len(calls) == 1
    assert len(set(texts)) == 1 and json.loads(texts[0])["module"] == "once"


# -- 3. a report rewritten while it is read ------------------------------------------------------


def test_report_rewritten_while_read(server, logdir):
    """Atomic rewrites and a foreign in-place writer vs. 8 readers: each answer is one whole
    version or a clean error for that run alone; the other runs answer 200 throughout."""
    versions = {m: tagged_report(n, m) for m, n in RW_VERSIONS.items()}
    foreign = versions["rw_v3"].to_json().encode()
    path = logdir / RW_RUN / "plugins" / "hlo_roofline" / "report.json"
    stop = threading.Event()
    states: list[str] = []

    def in_place(data: bytes, pause: float) -> None:
        with open(path, "wb") as f:  # truncates: readers may see an empty or partial file
            f.write(data[: len(data) // 2])
            f.flush()
            time.sleep(pause)
            f.write(data[len(data) // 2 :])

    def writer() -> None:
        steps = [
            ("v1", lambda: versions["rw_v1"].write_tensorboard(logdir, RW_RUN)),
            ("v3 in place", lambda: in_place(foreign, 0.005)),
            ("partial", lambda: path.write_bytes(foreign[: len(foreign) * 2 // 5])),
            ("v2", lambda: versions["rw_v2"].write_tensorboard(logdir, RW_RUN)),
            ("empty", lambda: path.write_bytes(b"")),
        ]
        for name, step in itertools.cycle(steps):
            if stop.is_set():
                break
            step()
            states.append(name)
            time.sleep(0.015)
        versions["rw_v1"].write_tensorboard(logdir, RW_RUN)

    statuses: list[int] = []

    def rw_check(kind: str, chip: str | None) -> Check:
        def check(r: Response) -> str | None:
            statuses.append(r.status)
            if r.status != 200:
                return error_problem(r, (422,))
            if kind == "csv":  # made from the JSON the tab shows, whichever version it is
                return csv_problem(r, RW_VERSIONS, chip)
            return report_problem(r, RW_VERSIONS, chip)

        return check

    kinds = itertools.cycle([("report", None), ("report", "v5p"), ("csv", None), ("csv", "v5p")])
    others = itertools.cycle([job for run in RUNS for job in run_jobs(run, None)])
    jobs: list[tuple[str, Check]] = []
    for _ in range(80):  # per round: two requests for the rewritten run, one for another run
        kind, chip = next(kinds)
        jobs += [(route(kind, RW_RUN, chip), rw_check(kind, chip)), next(others)]
        jobs.append((route("report", RW_RUN), rw_check("report", None)))
    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        failures = hammer(server, jobs, workers=8)
    finally:
        stop.set()
        thread.join(30)
    assert not failures, f"{len(failures)} of {len(jobs)} failed:\n" + "\n".join(failures[:8])
    assert {"v1", "v2", "v3 in place", "partial", "empty"} <= set(states), states
    assert 200 in statuses, "the rewritten run never answered"
    assert report_problem(get(server, route("report", RW_RUN)), {"rw_v1": 9}) is None


# -- 4. corrupt reports --------------------------------------------------------------------------


def test_corrupt_reports_fail_alone(server, logdir):
    """Each broken report.json: a 422 JSON error on every route; runs and other runs unaffected."""

    def check(r: Response) -> str | None:
        problem = error_problem(r, (422,))
        if problem is None and ("corrupt" not in r.json()["error"] or str(logdir) in r.text):
            problem = "message does not say corrupt, or names a server path"
        return problem

    jobs: list[tuple[str, Check]] = []
    for name in CORRUPT:
        run = f"bad/{name}"
        jobs += [(route("report", run), check), (route("report", run, "v5p"), check)]
        jobs += [(route("csv", run), check), (route("csv", run, "h100-sxm"), check)]
        jobs += [(route("compare", "alpha", other=run), check)]
        jobs += [(route("compare", run, other="alpha"), check)]
        jobs += run_jobs("alpha", None)
    jobs.append((f"{PREFIX}/runs", lambda r: None if r.json() == all_runs() else "run list"))
    failures = hammer(server, jobs, workers=8)
    assert not failures, f"{len(failures)} of {len(jobs)} failed:\n" + "\n".join(failures[:8])


# -- 5. traversal --------------------------------------------------------------------------------


def test_run_names_never_reach_outside_the_logdir(server, base_dir):
    """Escaping run names (raw query text, sent as is) answer a 400/404 JSON error, never a file."""
    outside = str(base_dir / "outside")
    raw = [
        "..", "../x", "..%2Foutside", "../outside", "..%2F..%2Fetc%2Fpasswd",
        "..%252F..%252Fetc%252Fpasswd", "%2e%2e%2foutside", "alpha%2F..%2F..%2Foutside",
        "alpha/../../outside", "beta/./../../outside", "%2Fetc%2Fpasswd", quote(outside, safe=""),
        quote(str(base_dir / "secret.txt"), safe=""), "alpha%00", "%00", "..%00/outside",
        "alpha%5C..%5C..%5Coutside", "C:%2Fx", "%2F%2Flocalhost%2Fetc", "dirlink", "dirlink%2F.",
        "filelink", "csvlink", "x" * 4096, "y" * 60_000, "%2e" * 3000,
    ]  # fmt: skip
    check = lambda r: error_problem(r, (400, 404)) or no_leak(r)  # noqa: E731
    jobs: list[tuple[str, Check]] = []
    for value in raw:
        jobs += [(f"{PREFIX}/{name}?run={value}", check) for name in ("report", "csv")]
        jobs += [(f"{PREFIX}/compare?run=alpha&other={value}", check)]
        jobs += [(f"{PREFIX}/csv?run={value}&chip=v5p", check)]
    failures = hammer(server, jobs, workers=8)
    assert not failures, f"{len(failures)} of {len(jobs)} failed:\n" + "\n".join(failures[:8])
    # The links inside the logdir are refused as leaving it (not merely unknown).
    for run in ("dirlink", "filelink", "csvlink"):
        r = get(server, route("report", run))
        assert r.status == 400 and "leaves the logdir" in r.json()["error"], r


def test_paths_never_reach_outside_the_plugin(server):
    """Traversal in the URL path itself: TensorBoard's 404, never a file or the plugin's source."""
    targets = [
        "/../../secret.txt", "/..%2F..%2F..%2Fsecret.txt", "/%2e%2e/%2e%2e/plugin.py",
        "/static/../plugin.py", "/plugin.py", "/_data.py", "/__init__.py", "/static/index.js",
        "/index.js%00", "/index.js/..%2Fplugin.py", "/./index.js", "/runs/../../../etc/passwd",
        "/report%00?run=alpha", "/%2e%2e%2f%2e%2e%2fsecret.txt",
    ]  # fmt: skip
    check = lambda r: None if r.status in (400, 404) else f"status {r.status}"  # noqa: E731
    failures = hammer(server, [(PREFIX + t, lambda r: check(r) or no_leak(r)) for t in targets])
    failures += [
        f"{t}: {p}"
        for t in ("/../../../etc/passwd", "/data/../../secret.txt")
        if (p := no_leak(get(server, t)))
    ]
    assert not failures, "\n".join(failures)


# -- 6. escaping ---------------------------------------------------------------------------------


def test_hostile_op_names_come_back_as_json_data(server):
    r = get(server, route("report", "hostile"))
    assert r.status == 200 and r.headers["content-type"].startswith("application/json"), r
    assert r.headers["x-content-type-options"] == "nosniff"
    assert HOSTILE not in r.text  # its quote is escaped: the text is a JSON string, not markup
    assert json.dumps(HOSTILE)[1:-1] in r.text
    body = r.json()
    columns = body["columns"]
    op_names = [row[columns.index("op_name")] for row in rows_of(body)]
    sources = [row[columns.index("source")] for row in rows_of(body)]
    assert f"jit(step)/{HOSTILE}" in op_names and f"{HOSTILE}.py:1" in sources


def test_hostile_csv_is_an_attachment(server):
    r = get(server, route("csv", "hostile"))
    assert r.status == 200 and r.headers["content-type"].startswith("text/csv"), r
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["content-disposition"] == 'attachment; filename="hostile.hlo_roofline.csv"'
    rows = list(csv.DictReader(io.StringIO(r.text)))  # a plain CSV: the columns first
    assert f"jit(step)/{HOSTILE}" in [row["op_name"] for row in rows]


def test_hostile_run_name(server):
    """A run whose name is markup: listed and served as data; its CSV file name is sanitized."""
    runs = get(server, f"{PREFIX}/runs")
    assert EVIL_RUN in runs.json() and HOSTILE not in runs.text
    assert report_problem(get(server, route("report", EVIL_RUN)), {"evil": 3}) is None
    r = get(server, route("csv", EVIL_RUN))
    assert csv_problem(r, {"evil": 3}) is None, r
    assert re.fullmatch(
        r'attachment; filename="[A-Za-z0-9._-]+\.hlo_roofline\.csv"',
        r.headers["content-disposition"],
    ), r.headers["content-disposition"]
    for target in (route("report", HOSTILE), route("report", "alpha", chip=HOSTILE)):
        r = get(server, target)
        assert error_problem(r, (400, 404)) is None, r
        assert r.headers["x-content-type-options"] == "nosniff"
