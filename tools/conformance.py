"""``make conformance``: Ironic's own API test suite against metalforge.

Runs ironic-tempest-plugin's ``tests.api.admin`` and ``tests.api.rbac_defaults``
with tempest against the all-in-one service in keystone mode, as an Ironic
deployment would be tested. Everything lives in a private temporary
directory: a real Keystone from ``.keystone-venv`` (gunicorn, SQLite, fernet
tokens, the ``baremetal`` service in its catalog pointing at metalforge, an
``ironic`` service user for keystonemiddleware), metalforge itself from
``.venv`` on a SQLite database, and a tempest workspace whose
``tempest.conf`` is written here. Both servers listen on free loopback ports
and are stopped whatever happens; their logs and tempest's are kept.

Prints passed, failed and skipped per test class and per suite. A failure
that ``tools/conformance-known-failures.txt`` does not list fails the run
(exit 1), as does the runner itself breaking (exit 2): a server that does
not start, a suite in which no test ran. A listed test that passes is
reported ("now passing: remove from the list") without failing the run.
See docs/conformance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from metalforge_lab.keystone import Keystone, missing_keystone, running_keystone
from metalforge_lab.ports import free_port

ROOT = Path(__file__).resolve().parent.parent

PLUGIN = "ironic_tempest_plugin.tests.api."
SUITES = ("admin", "rbac_defaults")
"""The plugin's API suites run, in this order (``PLUGIN + name`` is the tempest regex)."""
KNOWN_FAILURES = ROOT / "tools" / "conformance-known-failures.txt"
ADMIN_PASSWORD = "conformance-admin"
"""Keystone's bootstrap admin, which tempest uses to create a user per test class."""
SERVICE_PASSWORD = "conformance-ironic"
"""metalforge's own Keystone user (``ironic`` in project ``service``), for keystonemiddleware."""
START_TIMEOUT = 120.0
"""Seconds metalforge gets to answer ``GET /v1`` (migrations, imports, on 2 busy cores)."""
SUITE_TIMEOUT = 3600.0
"""Seconds one tempest suite may take before the run is called broken."""
TRACEBACK_LINES = 15
"""Lines of each unexpected failure's traceback printed in CI."""

EXIT_UNEXPECTED = 1
EXIT_BROKEN = 2


class Broken(Exception):
    """The runner could not produce results: the run says nothing about metalforge."""


@dataclass(frozen=True)
class Outcome:
    """One test's end: its id without tempest's ``[id-...]`` suffix, status and details."""

    id: str
    status: str
    details: dict[str, str]

    @property
    def test_class(self) -> str:
        """``module.Class`` relative to the plugin's API tests, also for class fixtures.

        A class whose ``setUpClass`` skips or fails is reported as one test named
        ``setUpClass (package.module.Class)``.
        """
        fixture = re.fullmatch(r"\w+ \((.+)\)", self.id)
        name = fixture.group(1) if fixture else self.id.rsplit(".", 1)[0]
        for prefix in (PLUGIN + suite + "." for suite in SUITES):
            name = name.removeprefix(prefix)
        return name

    @property
    def passed(self) -> bool:
        return self.status in ("success", "xfail")

    @property
    def failed(self) -> bool:
        return self.status in ("fail", "uxsuccess")


@dataclass
class SuiteResult:
    name: str
    outcomes: list[Outcome]
    seconds: float


# --- the known failures -----------------------------------------------------------------


def read_known_failures(path: Path) -> dict[str, str]:
    """Test id -> reason, from ``path``: one id per line under a ``# reason`` comment.

    A comment at the end of an id's line is its reason; otherwise the last
    comment line above it is.
    """
    known: dict[str, str] = {}
    reason = ""
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line, _, comment = raw.partition("#")
        line, comment = line.strip(), comment.strip()
        if not line:
            if comment:
                reason = comment
            continue
        if not (comment or reason):
            raise Broken(f"{path}:{number}: {line} has no reason (a # comment above it)")
        known[strip_suffix(line)] = comment or reason
    return known


def strip_suffix(test_id: str) -> str:
    """``...TestNodes.test_create_node[id-4e939eb2,...]`` -> ``...TestNodes.test_create_node``."""
    return re.sub(r"\[[^\]]*\]$", "", test_id)


# --- Keystone ---------------------------------------------------------------------------


def register_metalforge(keystone: Keystone, url: str) -> None:
    """The ``baremetal`` service at ``url`` in the catalog, and metalforge's service user.

    Tempest finds the API through the catalog (public, internal and admin
    endpoints all point at metalforge); keystonemiddleware in metalforge
    validates tokens as ``ironic`` (admin and service on project ``service``).
    """
    token = keystone.admin_token()

    def post(path: str, body: dict[str, Any]) -> Any:
        return keystone.request("POST", path, body, token=token, expect=(201,)).json()

    service = post("/services", {"service": {"type": "baremetal", "name": "ironic"}})["service"]
    for interface in ("public", "internal", "admin"):
        endpoint = {
            "service_id": service["id"],
            "interface": interface,
            "url": url,
            "region_id": keystone.region,
        }
        post("/endpoints", {"endpoint": endpoint})
    project = keystone.create_project("service")
    user = keystone.create_user("ironic", SERVICE_PASSWORD)
    for role in ("admin", "service"):
        keystone.grant_project_role(user, project, role)


# --- metalforge -------------------------------------------------------------------------


def metalforge_settings(state: Path, port: int, inspector_port: int, keystone: Keystone) -> str:
    """``make run``'s all-in-one in keystone mode, on free ports, its files in ``state``."""

    def q(value: object) -> str:
        return json.dumps(str(value))  # a TOML basic string

    return f"""\
state_dir = {q(state)}

[api]
host = "127.0.0.1"
port = {port}
auth_strategy = "keystone"

[inspector]
port = {inspector_port}

[database]
url = {q(f"sqlite:///{state / 'metalforge.sqlite'}")}

[conductor]
shutdown_timeout = 5.0

[keystone_authtoken]
auth_type = "password"
www_authenticate_uri = {q(keystone.auth_url)}
auth_url = {q(keystone.auth_url)}
username = "ironic"
password = {q(SERVICE_PASSWORD)}
user_domain_name = "Default"
project_name = "service"
project_domain_name = "Default"
region_name = {q(keystone.region)}
interface = "public"
"""


def api_version(url: str) -> str | None:
    """The highest microversion ``GET /v1`` announces, or None while nothing answers."""
    try:
        with urllib.request.urlopen(f"{url}/v1", timeout=5) as response:
            body = json.load(response)
    except (OSError, ValueError):
        return None
    return str(body["version"]["version"])


@contextlib.contextmanager
def running_metalforge(
    venv: Path, state: Path, port: int, keystone: Keystone, log: Path
) -> Iterator[str]:
    """The all-in-one service on ``port``, until the block ends: yields its highest microversion."""
    state.mkdir(mode=0o700)
    url = f"http://127.0.0.1:{port}"
    config = state / "metalforge.toml"
    config.write_text(metalforge_settings(state, port, free_port(), keystone))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("METALFORGE_", "OS_"))}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [str(venv / "bin" / "metalforge"), "--config", str(config), "all-in-one"],
            env=env,
            cwd=state,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group, stopped as one below
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while (version := api_version(url)) is None:
            if proc.poll() is not None:
                raise Broken(f"metalforge exited with {proc.returncode}; see {log}")
            if time.monotonic() > deadline:
                raise Broken(f"metalforge did not answer on {url} in {START_TIMEOUT:.0f}s")
            time.sleep(0.3)
        yield version
    finally:
        stop_group(proc, grace=30.0)


def stop_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process, then SIGKILL its whole process group."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


# --- tempest ----------------------------------------------------------------------------


def tempest_conf(workspace: Path, keystone: Keystone, max_version: str) -> str:
    """Tempest and the plugin told about this Keystone and this metalforge.

    The interface lists equal what metalforge's ``fake-hardware`` enables
    (``test_set_interfaces`` sets each one); ``enforce_scope`` makes the tests
    use system-scoped admins and expect Ironic's secure-RBAC defaults.
    """
    interfaces = "\n".join(
        f"enabled_{family}_interfaces = fake"
        for family in (
            "bios",
            "boot",
            "console",
            "deploy",
            "inspect",
            "management",
            "power",
            "raid",
            "rescue",
        )
    )
    return f"""\
[DEFAULT]
log_dir = {workspace / "logs"}
log_file = tempest.log
debug = false

[oslo_concurrency]
lock_path = {workspace / "tempest_lock"}

[auth]
use_dynamic_credentials = true
create_isolated_networks = false
admin_username = admin
admin_password = {ADMIN_PASSWORD}
admin_project_name = admin
admin_domain_name = Default
admin_system = all
default_credentials_domain_name = Default

[identity]
uri_v3 = {keystone.auth_url}
auth_version = v3
region = {keystone.region}
v3_endpoint_type = public
admin_domain_scope = false

[identity-feature-enabled]
api_v2 = false
api_v3 = true

[service_available]
ironic = true
nova = false
neutron = false
glance = false
cinder = false
swift = false
ironic_inspector = false

[enforce_scope]
ironic = true

[validation]
run_validation = false

[baremetal]
catalog_type = baremetal
endpoint_type = public
driver = fake-hardware
min_microversion = 1.1
max_microversion = {max_version}
enabled_drivers =
enabled_hardware_types = fake-hardware
{interfaces}
power_timeout = 60
unprovision_timeout = 120
active_timeout = 120
deploywait_timeout = 60
association_timeout = 30
"""


def tempest_environment() -> dict[str, str]:
    """The caller's environment without OpenStack client settings (``OS_CLOUD``, ...)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("OS_")}


def init_workspace(venv: Path, workspace: Path, keystone: Keystone, max_version: str) -> None:
    # The registry of workspaces goes to the state directory, not ~/.tempest.
    subprocess.run(
        [
            str(venv / "bin" / "tempest"),
            "init",
            "--workspace-path",
            str(workspace.parent / "tempest-workspaces.yaml"),
            str(workspace),
        ],
        env=tempest_environment(),
        stdout=subprocess.DEVNULL,
        check=True,
        timeout=300,
    )
    (workspace / "etc" / "tempest.conf").write_text(tempest_conf(workspace, keystone, max_version))


def run_suite(venv: Path, workspace: Path, suite: str, concurrency: int) -> SuiteResult:
    """``tempest run`` of one suite, its subunit stream kept in the workspace.

    ``tempest run --subunit`` exits 0 when tests fail: the outcomes come from the stream.
    """
    stream = workspace / f"{suite}.subunit"
    errors = workspace / "logs" / f"tempest-run-{suite}.log"
    started = time.monotonic()
    print(f"tempest: {PLUGIN}{suite} (concurrency {concurrency}) ...", flush=True)
    with stream.open("wb") as out, errors.open("wb") as err:
        done = subprocess.run(
            [
                str(venv / "bin" / "tempest"),
                "run",
                "--regex",
                PLUGIN + suite,
                "--concurrency",
                str(concurrency),
                "--subunit",
            ],
            cwd=workspace,
            env=tempest_environment(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            timeout=SUITE_TIMEOUT,
            check=False,
        )
    seconds = time.monotonic() - started
    parsed = subprocess.run(
        [str(venv / "bin" / "python"), str(ROOT / "tools" / "conformance_results.py"), str(stream)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if parsed.returncode != 0:
        raise Broken(f"cannot read {stream}: {parsed.stderr.strip()}")
    outcomes = [
        Outcome(id=strip_suffix(o["id"]), status=o["status"], details=o["details"])
        for o in json.loads(parsed.stdout)
    ]
    if not outcomes:
        raise Broken(f"no test of {suite} ran (tempest exited {done.returncode}); see {errors}")
    return SuiteResult(suite, outcomes, seconds)


# --- the report -------------------------------------------------------------------------


def class_table(result: SuiteResult) -> list[str]:
    counts: dict[str, Counter[str]] = {}
    for outcome in result.outcomes:
        kind = "passed" if outcome.passed else "failed" if outcome.failed else "skipped"
        counts.setdefault(outcome.test_class, Counter())[kind] += 1
    width = max(len(name) for name in counts) + 2
    lines = [
        f"{PLUGIN}{result.name}",
        f"  {'class':<{width}}{'passed':>7}{'failed':>7}{'skipped':>8}",
    ]
    for name in sorted(counts):
        c = counts[name]
        lines.append(f"  {name:<{width}}{c['passed']:>7}{c['failed']:>7}{c['skipped']:>8}")
    total: Counter[str] = sum(counts.values(), Counter())
    lines.append(
        f"  {'total':<{width}}{total['passed']:>7}{total['failed']:>7}{total['skipped']:>8}"
        f"   ({result.seconds:.0f}s)"
    )
    return lines


def totals(result: SuiteResult) -> str:
    passed = sum(o.passed for o in result.outcomes)
    failed = sum(o.failed for o in result.outcomes)
    skipped = len(result.outcomes) - passed - failed
    return (
        f"{result.name}: passed={passed} failed={failed} skipped={skipped} "
        f"seconds={result.seconds:.0f}"
    )


def tail(outcome: Outcome, lines: int) -> str:
    text = outcome.details.get("traceback") or "\n".join(outcome.details.values())
    return "\n".join("    " + line for line in text.rstrip().splitlines()[-lines:])


def report(results: Sequence[SuiteResult], known: dict[str, str], state: Path) -> int:
    """Print the tables and the verdict; write what did not pass to ``state``. Exit status."""
    outcomes = [o for result in results for o in result.outcomes]
    for result in results:
        print("\n".join(class_table(result)), end="\n\n")
    unexpected = [o for o in outcomes if o.failed and o.id not in known]
    now_passing = [o for o in outcomes if o.passed and o.id in known]
    seen = {o.id for o in outcomes}
    suites = tuple(f"{PLUGIN}{result.name}." for result in results)
    not_run = sorted(t for t in known if t not in seen and any(s in t for s in suites))

    not_passing = [o for o in outcomes if not o.passed]
    (state / "not-passing.txt").write_text(
        "".join(f"{o.status} {o.id}\n" for o in sorted(not_passing, key=lambda o: o.id))
    )
    with (state / "not-passing-details.txt").open("w") as out:
        for o in sorted(not_passing, key=lambda o: o.id):
            out.write(f"===== {o.status} {o.id}\n")
            for name, text in o.details.items():
                out.write(f"----- {name}\n{text.rstrip()}\n")

    for o in now_passing:
        print(f"now passing: remove from the list: {o.id}")
    for test_id in not_run:
        print(f"listed but not run (renamed or removed?): {test_id}")
    for o in sorted(unexpected, key=lambda o: o.id):
        print(f"FAILED (not a known failure): {o.id}")
        if os.environ.get("CI"):
            print(tail(o, TRACEBACK_LINES))
    for result in results:
        print(totals(result))
    known_failed = sum(o.failed and o.id in known for o in outcomes)
    print(
        f"known failures: {known_failed} failed, {len(now_passing)} now passing "
        f"({KNOWN_FAILURES.relative_to(ROOT)}); unexpected failures: {len(unexpected)}"
    )
    print(f"what did not pass: {state / 'not-passing.txt'} (tracebacks: not-passing-details.txt)")
    return EXIT_UNEXPECTED if unexpected else 0


# --- main -------------------------------------------------------------------------------


def _terminate(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop the servers


def run(args: argparse.Namespace, state: Path) -> int:
    known = read_known_failures(KNOWN_FAILURES)
    os.environ["KEYSTONE_VENV"] = str(args.keystone_venv)  # what metalforge_lab.keystone runs
    reason = missing_keystone()
    if reason is not None:
        raise Broken(reason)
    for tool in ("tempest", "python"):
        if not os.access(args.tempest_venv / "bin" / tool, os.X_OK):
            raise Broken(f"no {tool} in {args.tempest_venv} (make .tempest-venv/.installed-stamp)")

    outcome: list[SuiteResult] | Exception
    with running_keystone(
        state, admin_password=ADMIN_PASSWORD, enforce_scope=False, threads=1
    ) as keystone:
        # An error is raised once Keystone has stopped: inside, the harness would print
        # all of Keystone's log, which stays in the state directory anyway.
        try:
            outcome = run_suites(args, state, keystone)
        except Exception as error:  # noqa: BLE001 - raised below, once Keystone has stopped
            outcome = error
    if isinstance(outcome, Exception):
        raise outcome
    return report(outcome, known, state)


def run_suites(args: argparse.Namespace, state: Path, keystone: Keystone) -> list[SuiteResult]:
    """metalforge started beside ``keystone``, the suites run against it, metalforge stopped."""
    # Its service user and catalog entry exist before it starts.
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    register_metalforge(keystone, url)
    results: list[SuiteResult] = []
    log = state / "metalforge.log"
    with running_metalforge(args.venv, state / "metalforge", port, keystone, log) as version:
        print(f"metalforge on {url} (microversions 1.1 to {version}), keystone on {keystone.url}")
        workspace = state / "tempest"
        init_workspace(args.tempest_venv, workspace, keystone, version)
        for suite in args.suites:
            results.append(run_suite(args.tempest_venv, workspace, suite, args.concurrency))
            print(totals(results[-1]), flush=True)
    return results


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv", help="metalforge's virtualenv")
    parser.add_argument("--keystone-venv", type=Path, default=ROOT / ".keystone-venv")
    parser.add_argument("--tempest-venv", type=Path, default=ROOT / ".tempest-venv")
    parser.add_argument("--concurrency", type=int, default=2, help="tempest workers (default 2)")
    parser.add_argument(
        "--suite",
        dest="suites",
        action="append",
        choices=SUITES,
        help="run only this suite (repeatable; default: all)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="where everything goes (a new directory; default: a temporary one)",
    )
    args = parser.parse_args(argv)
    args.suites = args.suites or list(SUITES)
    for name in ("venv", "keystone_venv", "tempest_venv"):
        setattr(args, name, getattr(args, name).absolute())
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # progress shows in CI's log as it happens
    if args.state_dir is None:
        state = Path(tempfile.mkdtemp(prefix="metalforge-conformance-"))
    else:
        state = args.state_dir.absolute()
        try:
            state.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            print(f"conformance run broken: {state} exists (give a new directory)", file=sys.stderr)
            return EXIT_BROKEN
    signal.signal(signal.SIGTERM, _terminate)
    started = time.monotonic()
    print(f"state and logs: {state}", flush=True)
    try:
        status = run(args, state)
    except Broken as error:
        print(f"conformance run broken: {error}", file=sys.stderr)
        status = EXIT_BROKEN
    except Exception:  # noqa: BLE001 - any error is a broken run; its traceback is printed
        traceback.print_exc()
        print("conformance run broken (see the traceback above)", file=sys.stderr)
        status = EXIT_BROKEN
    print(
        f"logs: {state}/metalforge.log, {state}/keystone/keystone.log, "
        f"{state}/tempest/logs/ ({time.monotonic() - started:.0f}s in all)"
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
