"""The TensorBoard plugin: routes under ``/data/plugin/hlo_roofline/`` and the static frontend.

Runs are directories ``<logdir>/<run>/plugins/hlo_roofline/`` holding ``report.json`` (written by
``Report.write_tensorboard``); the run name is ``<run>`` relative to the logdir, ``"."`` at the top.
No event file is needed: the plugin walks the logdir itself.

This module is what TensorBoard imports at startup, so it imports only the standard library,
tensorboard, werkzeug and the logdir layout (``hlo_roofline`` loads its names lazily: no JAX, no
pandas). Reading, re-classifying and comparing reports (pandas) happens in
:mod:`hlo_roofline_tensorboard._data`, imported by the first request that needs it.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from pathlib import Path

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from hlo_roofline.logdir import EXPLORE_JSON, PLUGIN_NAME, REPORT_CSV, REPORT_JSON
from hlo_roofline_tensorboard._json import dumps
from hlo_roofline_tensorboard._remote import gfile
from hlo_roofline_tensorboard._remote import is_remote as remote

logger = logging.getLogger(__name__)

TAB_NAME = "HLO Roofline"
TOP_RUN = "."

STATIC_DIR = Path(__file__).resolve().parent / "static"
# Every file the frontend may load, served at ``/<name>``; nothing else under static/ is reachable.
_MODULES = ("index", "state", "url", "summary", "chart", "table", "cells", "groups", "details",
            "compare", "timeline", "explore", "util")  # fmt: skip
STATIC_FILES = {**{f"{name}.js": "text/javascript" for name in _MODULES}, "style.css": "text/css"}

_MAX_RUN_CHARS = 1024
_INACTIVE_RECHECK_S = 5.0  # a negative is_active() is re-checked at most this often
_CHIP_RE = re.compile(r"^[A-Za-z0-9 ._()+/-]{1,100}$")


class BadRequest(ValueError):
    """A malformed query parameter (answered with 400)."""


class NotFound(LookupError):
    """A well-formed run that has no report (answered with 404)."""


def _json_response(request, value, code: int = 200):
    body = value if isinstance(value, str | bytes) else dumps(value)
    return http_util.Respond(request, body, "application/json", code=code)


def _error(request, message: str, code: int):
    return _json_response(request, {"error": message}, code)


class RunIndex:
    """Finds runs under one logdir and maps a run name to its report directory, safely.

    A local logdir is walked with ``os`` (links resolved: nothing outside it is served); a remote
    one (``gs://bucket/logs``) through TensorBoard's gfile, which has no links to follow."""

    def __init__(self, logdir: str) -> None:
        self.logdir = logdir or ""
        self.remote = remote(self.logdir)
        if self.remote:
            self.root = self.logdir.rstrip("/")
        else:
            self.root = os.path.realpath(self.logdir) if self.logdir else ""

    def _walk(self):
        if self.remote:
            if not gfile().isdir(self.root):
                return
            yield from gfile().walk(self.root)
            return
        if not self.root or not os.path.isdir(self.root):
            return
        yield from os.walk(self.root)

    def iter_runs(self):
        """Run names in walk order (lazy, so "is there any run?" stops at the first)."""
        for dirpath, dirnames, filenames in self._walk():
            if self.remote:
                dirpath = dirpath.rstrip("/")
                dirnames[:] = [d.rstrip("/") for d in dirnames]
            dirnames.sort()
            if (
                os.path.basename(dirpath) == PLUGIN_NAME
                and os.path.basename(os.path.dirname(dirpath)) == "plugins"
                and REPORT_JSON in filenames
            ):
                run_dir = os.path.dirname(os.path.dirname(dirpath))
                if self.remote:
                    yield run_dir[len(self.root) :].strip("/") or TOP_RUN
                else:
                    yield os.path.relpath(run_dir, self.root).replace(os.sep, "/")
                dirnames[:] = []  # nothing below a report directory is a run

    def runs(self) -> list[str]:
        return sorted(self.iter_runs())

    def explorations(self) -> list[tuple[str, str]]:
        """``(directory relative to the logdir, "." at the top; its exploration file)`` for every
        ``EXPLORE_JSON`` the explorer wrote beside its runs, top first. Nothing under a run's
        ``plugins`` folder is looked at, and no link leads outside the logdir."""
        found = []
        for dirpath, dirnames, filenames in self._walk():
            dirpath = dirpath.rstrip("/") if self.remote else dirpath
            dirnames[:] = sorted(d.rstrip("/") for d in dirnames if d.rstrip("/") != "plugins")
            if EXPLORE_JSON not in filenames:
                continue
            path = f"{dirpath}/{EXPLORE_JSON}" if self.remote else os.path.join(dirpath, EXPLORE_JSON)
            if self.remote:
                where = dirpath[len(self.root) :].strip("/") or TOP_RUN
            elif self._inside(path):
                where = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            else:
                continue
            found.append((where, path))
        return sorted(found, key=lambda f: (f[0] != TOP_RUN, f[0]))

    def _inside(self, path: str) -> bool:
        """True if ``path``, all links resolved, lies under the logdir."""
        return os.path.commonpath([self.root, os.path.realpath(path)]) == self.root

    def xprof_session(self, run: str, recorded: str) -> dict:
        """The XProf (profile plugin) run of a trace file a report records, if it is in the logdir.

        jax.profiler writes ``<dir>/plugins/profile/<session>/<host>.xplane.pb``; the profile plugin
        names that session ``<dir relative to the logdir>/<session>``. The recorded path is the
        writer's: looked up as written, then under the run's directory and each parent up to the
        logdir (a logdir copied elsewhere keeps its layout).
        """
        parts = recorded.replace("\\", "/").split("/")
        found = {"recorded": os.path.basename(recorded), "run": None, "host": None}
        if len(parts) < 4 or parts[-4:-2] != ["plugins", "profile"] or not self.root or self.remote:
            return found
        session, name = parts[-2], parts[-1]
        tail = os.path.join("plugins", "profile", session, name)
        rel = [] if run == TOP_RUN else run.split("/")
        candidates = [os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(recorded))))]
        candidates += [os.path.join(self.root, *rel[:i]) for i in range(len(rel), -1, -1)]
        for directory in candidates:
            trace = os.path.join(directory, tail)
            if os.path.isabs(trace) and self._inside(trace) and os.path.isfile(trace):
                where = os.path.relpath(os.path.realpath(directory), self.root).replace(os.sep, "/")
                found["run"] = session if where == "." else f"{where}/{session}"
                found["host"] = name.removesuffix(".xplane.pb")
                break
        return found

    def report_dir(self, run: str | None) -> str:
        """The directory holding ``run``'s report; BadRequest for a name that is not a run path."""
        if not run or len(run) > _MAX_RUN_CHARS:
            raise BadRequest("missing or overlong run name")
        if "\x00" in run or "\\" in run or run.startswith("/") or re.match(r"^[A-Za-z]:", run):
            raise BadRequest(f"invalid run name {run!r}")
        parts = run.split("/")
        if run != TOP_RUN and any(p in ("", ".", "..") for p in parts):
            raise BadRequest(f"invalid run name {run!r}")
        if not self.root:
            raise NotFound("no logdir")
        rel = [] if run == TOP_RUN else parts
        if self.remote:
            path = "/".join([self.root, *rel, "plugins", PLUGIN_NAME])
            if not gfile().exists(f"{path}/{REPORT_JSON}"):
                raise NotFound(f"no report for run {run!r}")
            return path
        path = os.path.realpath(os.path.join(self.root, *rel, "plugins", PLUGIN_NAME))
        # A linked directory, report.json or report.csv would serve whatever it points at.
        files = (path, os.path.join(path, REPORT_JSON), os.path.join(path, REPORT_CSV))
        if not all(self._inside(f) for f in files):
            raise BadRequest(f"run {run!r} leaves the logdir")
        if not os.path.isfile(os.path.join(path, REPORT_JSON)):
            raise NotFound(f"no report for run {run!r}")
        return path


def _download_stem(run: str | None, chip: str | None) -> str:
    """A download's file name from its run (and the chip a re-judged report is for): safe on
    every filesystem, never a path."""
    named = f"{run}.{chip}" if chip else str(run)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", named).strip("._") or "report"


def _chip_param(request) -> str | None:
    chip = request.args.get("chip") or None
    if chip is not None and not _CHIP_RE.match(chip):
        raise BadRequest(f"invalid chip name {chip!r}")
    return chip


class HloRooflinePlugin(base_plugin.TBPlugin):
    """Serves hlo_roofline reports found under the logdir as the "HLO Roofline" tab."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext, warm: bool = True) -> None:
        self._index = RunIndex(context.logdir)
        self._active = False
        self._checked_at = -math.inf
        self._lock = threading.Lock()
        # The report reader (pandas, hlo_roofline) is imported beside TensorBoard's start, and the
        # run the tab shows first is read: a cold server's first paint waits for neither.
        self.warmed = threading.Thread(
            target=_warm, args=(self._index,), name="hlo_roofline-warm", daemon=True
        )
        if warm:
            self.warmed.start()

    # -- TBPlugin ---------------------------------------------------------------------------

    def is_active(self) -> bool:
        """True once a report exists; a True answer is cached, a False one re-checked every 5 s."""
        if self._active:
            return True
        now = time.monotonic()
        with self._lock:
            if now - self._checked_at < _INACTIVE_RECHECK_S:
                return False
            self._checked_at = now
        try:
            self._active = next(self._index.iter_runs(), None) is not None
        except OSError:
            return False
        return self._active

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(
            es_module_path="/index.js", tab_name=TAB_NAME, disable_reload=False
        )

    def get_plugin_apps(self) -> dict:
        apps = {f"/{name}": self._serve_static for name in STATIC_FILES}
        apps.update(
            {
                "/runs": self._serve_runs,
                "/run_errors": self._serve_run_errors,
                "/trace": self._serve_trace,
                "/chips": self._serve_chips,
                "/report": self._serve_report,
                "/csv": self._serve_csv,
                "/compare": self._serve_compare,
                "/rollup": self._serve_rollup,
                "/timeline": self._serve_timeline,
                "/trace_events": self._serve_trace_events,
                "/constants": self._serve_constants,
                "/explorations": self._serve_explorations,
            }
        )
        return apps

    # -- handlers ---------------------------------------------------------------------------

    @wrappers.Request.application
    def _serve_static(self, request):
        name = request.path.rsplit("/", 1)[-1]
        content_type = STATIC_FILES.get(name)
        if content_type is None:
            return http_util.Respond(request, "not found", "text/plain", code=404)
        body = (STATIC_DIR / name).read_bytes()
        return http_util.Respond(request, body, content_type)

    @wrappers.Request.application
    def _serve_runs(self, request):
        runs = self._index.runs()
        if runs:
            self._active = True
        return _json_response(request, runs)

    @wrappers.Request.application
    def _serve_run_errors(self, request):
        """``{run: message}`` for every run whose report cannot be shown (the tab offers the rest)."""

        def answer(_data):
            errors = {}
            for run in self._index.runs():
                try:
                    message = _data.check(self._index.report_dir(run))
                except (BadRequest, NotFound) as exc:
                    message = str(exc)
                if message:
                    errors[run] = self._redact(message)
            return _json_response(request, errors)

        return self._guarded(request, answer)

    @wrappers.Request.application
    def _serve_trace(self, request):
        """Where the XProf session a measured run was profiled in lives, as profile-plugin names."""

        def answer(_data):
            run = request.args.get("run")
            path = self._index.report_dir(run)
            recorded = (_data.load(path)[0].get("summary") or {}).get("measured_trace")
            if not isinstance(recorded, str) or not recorded:
                raise NotFound(f"run {run!r} records no trace")
            return _json_response(request, self._index.xprof_session(run, recorded))

        return self._guarded(request, answer)

    @wrappers.Request.application
    def _serve_chips(self, request):
        return self._guarded(request, lambda _data: _json_response(request, _data.chip_list()))

    @wrappers.Request.application
    def _serve_report(self, request):
        def answer(_data):
            path = self._index.report_dir(request.args.get("run"))
            since = request.args.get("since") or None  # a token: anything else matches nothing
            return _json_response(request, _data.report_json(path, _chip_param(request), since))

        return self._guarded(request, answer)

    @wrappers.Request.application
    def _serve_csv(self, request):
        def answer(_data):
            run = request.args.get("run")
            path = self._index.report_dir(run)
            chip = _chip_param(request)
            body = _data.report_csv(path, chip)
            stem = _download_stem(run, chip)
            return http_util.Respond(
                request,
                body,
                "text/csv",
                headers=[
                    ("Content-Disposition", f'attachment; filename="{stem}.hlo_roofline.csv"')
                ],
            )

        return self._guarded(request, answer)

    @wrappers.Request.application
    def _serve_compare(self, request):
        def answer(_data):
            run, other = request.args.get("run"), request.args.get("other")
            path_a = self._index.report_dir(run)
            path_b = self._index.report_dir(other)
            result = _data.compare(path_a, path_b, _chip_param(request))
            return _json_response(request, {"run": run, "other": other, **result})

        return self._guarded(request, answer)

    @wrappers.Request.application
    def _serve_rollup(self, request):
        """The run's ops grouped by user line, user function or scope (``Report.rollup``)."""

        def answer(_data):
            by = request.args.get("by", "")
            if by not in _data.GROUPINGS:
                raise BadRequest(f"by must be one of {', '.join(_data.GROUPINGS)}, not {by!r}")
            path = self._index.report_dir(request.args.get("run"))
            return _json_response(request, _data.rollup(path, by, _chip_param(request)))

        return self._guarded(request, answer)

    @wrappers.Request.application
    def _serve_timeline(self, request):
        """The run's step as scheduled: each op's lane, begin, end and exposed part."""

        def answer(_data):
            path = self._index.report_dir(request.args.get("run"))
            return _json_response(request, _data.timeline(path, _chip_param(request)))

        return self._guarded(request, answer)

    @wrappers.Request.application
    def _serve_trace_events(self, request):
        """The run's step as scheduled as a Chrome trace (Perfetto), as a download."""

        def answer(_data):
            run = request.args.get("run")
            chip = _chip_param(request)
            body = _data.trace_events(self._index.report_dir(run), chip)
            return http_util.Respond(
                request,
                body,
                "application/json",
                headers=[
                    (
                        "Content-Disposition",
                        f'attachment; filename="{_download_stem(run, chip)}.trace.json"',
                    )
                ],
            )

        return self._guarded(request, answer)

    @wrappers.Request.application
    def _serve_constants(self, request):
        """Bounds, colours, groupings and unit meanings: the server's, never repeated in JS."""
        return self._guarded(request, lambda _data: _json_response(request, _data.constants()))

    @wrappers.Request.application
    def _serve_explorations(self, request):
        """Every layout exploration in the logdir (``explore`` writes one beside its runs), as
        the exploration view draws it: ``[{"dir", ...}]``, a file that cannot be read as
        ``{"dir", "error"}``; its rows' ``run`` names the candidate's run where it is here.

        Rows come a page at a time (an exploration of 100k candidates is tens of MB): ``limit``
        rows (default ``EXPLORE_PAGE``, at most ``EXPLORE_PAGE_MAX``) from ``offset`` (default 0),
        best-ranked first, with ``rows_total``; ``dir`` asks for one exploration's page alone."""

        def answer(_data):
            offset = _count_arg(request, "offset", 0)
            limit = min(_count_arg(request, "limit", EXPLORE_PAGE), EXPLORE_PAGE_MAX)
            wanted = request.args.get("dir")
            runs = set(self._index.runs())
            out = []
            for where, path in self._index.explorations():
                if wanted is not None and where != wanted:
                    continue
                prefix = "" if where == TOP_RUN else f"{where}/"
                try:
                    page = _data.exploration(path, runs, prefix, offset=offset, limit=limit)
                    out.append({"dir": where, **page})
                except _data.ReportError as exc:
                    out.append({"dir": where, "error": self._redact(exc)})
            if wanted is not None and not out:
                raise NotFound(f"no exploration in {wanted!r}")
            return _json_response(request, out)

        return self._guarded(request, answer)

    def _guarded(self, request, answer):
        """Run ``answer(_data)``; turn every failure into a JSON error for this request only."""
        from hlo_roofline_tensorboard import _data

        try:
            return answer(_data)
        except BadRequest as exc:
            return _error(request, str(exc), 400)
        except NotFound as exc:
            return _error(request, str(exc), 404)
        except _data.UnknownChipError as exc:
            return _error(request, str(exc), 400)
        except (_data.ReportMissingError, FileNotFoundError):  # deleted since it was listed
            return _error(request, f"no report for run {request.args.get('run')!r}", 404)
        except _data.ReportError as exc:
            return _error(request, f"corrupt report: {self._redact(exc)}", 422)
        except Exception as exc:  # a report this version cannot handle: say so, keep serving
            logger.exception("hlo_roofline: %s failed", request.full_path)
            return _error(request, f"{type(exc).__name__}: {self._redact(exc)}", 500)

    def _redact(self, exc: Exception) -> str:
        """The message with the server's logdir path replaced by ``<logdir>``."""
        text = str(exc)
        for path in {self._index.root, self._index.logdir}:
            if path:
                text = text.replace(path, "<logdir>")
        return text


EXPLORE_PAGE, EXPLORE_PAGE_MAX = 500, 5000  # rows of an exploration per response


def _count_arg(request, name: str, default: int) -> int:
    """A query argument that is a count (0 or more); BadRequest for anything else."""
    text = request.args.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or len(text) > 12:
        raise BadRequest(f"{name} must be a whole number >= 0, not {text[:20]!r}")
    return int(text)


def _warm(index: RunIndex) -> None:
    """Import the report reader and read the biggest runs' reports into its cache, with their
    columns' texts (what a chip switch reuses), so a run's first paint does not depend on where
    its name sorts (``_data.warm_runs``). Best effort: any failure is the first request's to
    report."""
    try:
        from hlo_roofline_tensorboard import _data

        _data.warm_runs([index.report_dir(run) for run in index.runs()])
    except Exception:
        logger.debug("hlo_roofline: warming the report reader failed", exc_info=True)


class HloRooflineLoader(base_plugin.TBLoader):
    """Entry point of the ``tensorboard_plugins`` group."""

    def load(self, context: base_plugin.TBContext) -> HloRooflinePlugin:
        return HloRooflinePlugin(context)
