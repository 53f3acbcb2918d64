"""Submit a matrix of benchmark scenarios to SLURM as one serial chain of jobs.

Benchmarks that read from a network source measure the network too: two jobs running at once share the bucket's
bandwidth and each reports less than it would alone. The chain makes every job depend on the one before it
(`sbatch --dependency=afterany:<previous id>`), so exactly one benchmark job runs at a time, in a fixed order, and
a failed job does not stop the rest (`afterany`, not `afterok`).

The matrix is a TOML (or JSON) file:

    [defaults]                          # optional, applies to every scenario
    sbatch_args = ["--partition=gpu"]   # extra sbatch flags
    env = { ROOT = "s3://bucket/ds", OUT = "results/slurm" }

    [[scenario]]
    name = "robostream"                 # optional label, used in job names and errors
    script = "benchmarks/slurm/bench_1node.sbatch"
    nodes = [1, 2]                      # a list is an axis of the cartesian product
    sbatch_args = ["--time=00:20:00"]   # optional, after the defaults'
    env = { MODE = ["single", "sarm"], LOADER = ["stream", "map"] }

A scenario expands to the cartesian product of its list values (nodes first, then env keys in file order, the
last varying fastest); scenarios follow each other in file order. `plan` does this without any I/O; `submit` runs
the planned jobs through `sbatch` one by one, chaining each to the previous job id.

The environment reaches the job through the submitting process's environment (sbatch's `--export=ALL`), not as
`--export=K=V` pairs, so values may hold commas and spaces.

    python -m robostream.bench.chain MATRIX.toml [--dry-run] [--after JOBID]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from robostream.errors import RobostreamError

SCENARIO_KEYS = frozenset({"name", "script", "nodes", "sbatch_args", "env"})
DEFAULT_KEYS = frozenset({"sbatch_args", "env"})
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
JOB_ID = re.compile(r"\d+(_\d+)?")


class MatrixError(RobostreamError, ValueError):
    """The scenario matrix is malformed; the message names the scenario and key at fault."""


class SubmitError(RobostreamError, RuntimeError):
    """sbatch refused a job or answered something that is not a job id."""


@dataclass(frozen=True)
class Job:
    """One planned submission: `argv` runs sbatch (without the dependency), `env` is added to its environment."""

    label: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


Runner = Callable[[Sequence[str], Mapping[str, str]], subprocess.CompletedProcess]


def load_matrix(path: Path) -> dict:
    """Read a matrix file: TOML, or JSON when the name ends in .json."""
    is_json = Path(path).suffix == ".json"
    text = Path(path).read_text()
    try:
        return json.loads(text) if is_json else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as error:
        raise MatrixError(f"{path}: not valid {'JSON' if is_json else 'TOML'}: {error}") from None


def plan(matrix: Mapping) -> list[Job]:
    """The ordered jobs of a matrix: scenarios in file order, each expanded to the product of its list values."""
    matrix = _table(matrix, "the matrix", frozenset({"defaults", "scenario"}))
    defaults = _table(matrix.get("defaults", {}), "defaults", DEFAULT_KEYS)
    default_args = _string_list(defaults.get("sbatch_args", []), "defaults.sbatch_args")
    default_env = _env_axes(defaults.get("env", {}), "defaults.env")
    if any(len(values) != 1 for values in default_env.values()):
        raise MatrixError("defaults.env: values must be single values, not lists (put axes in a scenario)")
    scenarios = matrix.get("scenario")
    if not isinstance(scenarios, list) or not scenarios:
        raise MatrixError("the matrix needs at least one [[scenario]] table")
    jobs: list[Job] = []
    for index, scenario in enumerate(scenarios):
        jobs.extend(_expand(scenario, index, default_args, {k: v[0] for k, v in default_env.items()}))
    return jobs


def _expand(scenario: object, index: int, default_args: list[str], default_env: dict[str, str]) -> list[Job]:
    """The jobs of one scenario, in product order (nodes first, then env keys as written, last fastest)."""
    where = f"scenario[{index}]"
    scenario = _table(scenario, where, SCENARIO_KEYS)
    name = scenario.get("name", f"scenario{index}")
    if not isinstance(name, str) or not name:
        raise MatrixError(f"{where}.name: expected a non-empty string, got {name!r}")
    where = f"{where} ({name!r})"
    script = scenario.get("script")
    if not isinstance(script, str) or not script:
        raise MatrixError(f"{where}.script: expected the path of an sbatch script, got {script!r}")
    nodes = _node_axis(scenario.get("nodes"), f"{where}.nodes")
    args = default_args + _string_list(scenario.get("sbatch_args", []), f"{where}.sbatch_args")
    axes = _env_axes(scenario.get("env", {}), f"{where}.env")
    jobs = []
    for node_count, values in itertools.product(nodes, itertools.product(*axes.values())):
        env = default_env | dict(zip(axes, values))
        # name the job and the scenario by what varies; the fixed settings are in the matrix
        varying = [(key, value) for (key, choices), value in zip(axes.items(), values) if len(choices) > 1]
        label = " ".join([name, f"nodes={node_count}", *(f"{key}={value}" for key, value in varying)])
        job_name = _job_name([name, f"{node_count}n", *(value for _, value in varying)])
        argv = (
            "sbatch",
            "--parsable",
            f"--job-name={job_name}",
            f"--nodes={node_count}",
            "--export=ALL",
            *args,
            script,
        )
        jobs.append(Job(label=label, argv=argv, env=env))
    return jobs


def _table(value: object, where: str, allowed: frozenset[str]) -> Mapping:
    """`value` as a table, failing on keys outside `allowed` (a typo would otherwise be ignored silently)."""
    if not isinstance(value, Mapping):
        raise MatrixError(f"{where}: expected a table, got {value!r}")
    unknown = set(value) - allowed
    if unknown:
        raise MatrixError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    return value


def _string_list(value: object, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise MatrixError(f"{where}: expected a list of strings, got {value!r}")
    return list(value)


def _node_axis(value: object, where: str) -> list[int]:
    """`nodes`: a positive integer or a non-empty list of them."""
    values = value if isinstance(value, list) else [value]
    counts = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    if not values or len(counts) != len(values):
        raise MatrixError(f"{where}: expected a positive integer or a list of them, got {value!r}")
    return counts


def _env_axes(env: object, where: str) -> dict[str, list[str]]:
    """Each variable's values as strings: a scalar is a one-value axis, a list an axis of the product."""
    if not isinstance(env, Mapping):
        raise MatrixError(f"{where}: expected a table of environment variables, got {env!r}")
    axes = {}
    for key, value in env.items():
        if not ENV_NAME.fullmatch(key):
            raise MatrixError(f"{where}.{key}: not a valid environment variable name")
        values = value if isinstance(value, list) else [value]
        if not values or not all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in values):
            raise MatrixError(f"{where}.{key}: expected a string, a number or a non-empty list of them, got {value!r}")
        axes[key] = [str(v) for v in values]
    return axes


def _job_name(parts: Sequence[str]) -> str:
    """A short job name for squeue: rs-<parts joined by '-'>, characters other than [A-Za-z0-9_.] as '_'."""
    return "rs-" + "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", part) for part in parts)[:100]


def with_dependency(argv: Sequence[str], after: str | None) -> list[str]:
    """`argv` made to start after job `after` ends, whatever its outcome (unchanged when `after` is None)."""
    if after is None:
        return list(argv)
    return [argv[0], f"--dependency=afterany:{after}", *argv[1:]]


def parse_job_id(stdout: str) -> str:
    """The job id from `sbatch --parsable` output: `<id>` or `<id>;<cluster>` (array jobs: `<id>_<task>`)."""
    lines = stdout.strip().splitlines()
    job_id = lines[-1].split(";", 1)[0].strip() if lines else ""
    if not JOB_ID.fullmatch(job_id):
        raise SubmitError(f"sbatch --parsable printed {stdout!r}, which holds no job id")
    return job_id


def run_sbatch(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess:
    """Run sbatch with `env` added to this process's environment (sbatch exports it into the job)."""
    return subprocess.run(list(argv), env={**os.environ, **env}, capture_output=True, text=True, check=False)


def submit(jobs: Sequence[Job], runner: Runner = run_sbatch, after: str | None = None) -> list[str]:
    """Submit `jobs` in order, each depending on the previous one (the first on `after`); return the job ids.

    Stops at the first refusal: the jobs already queued stay queued (cancel them with `scancel`, ids in the error).
    """
    job_ids: list[str] = []
    for job in jobs:
        argv = with_dependency(job.argv, after)
        try:
            result = runner(argv, job.env)
        except OSError as error:
            raise SubmitError(f"could not run {argv[0]!r} for scenario {job.label!r}: {error}") from error
        if result.returncode != 0:
            raise SubmitError(
                f"sbatch failed (exit {result.returncode}) for scenario {job.label!r}: "
                f"{result.stderr.strip() or '(no stderr)'}; already queued: {job_ids or 'none'}"
            )
        try:
            after = parse_job_id(result.stdout)
        except SubmitError as error:
            raise SubmitError(f"scenario {job.label!r}: {error}; already queued: {job_ids or 'none'}") from None
        job_ids.append(after)
    return job_ids


def dry_run_lines(jobs: Sequence[Job], after: str | None = None) -> list[str]:
    """A bash script equivalent to `submit`: job n's id lands in $JOBn and job n+1 depends on it."""
    lines = []
    dependency = shlex.quote(after) if after is not None else None
    for number, job in enumerate(jobs, start=1):
        env = [f"{key}={shlex.quote(value)}" for key, value in job.env.items()]
        # the dependency may hold a shell expansion, so it is the one word left unquoted
        chain = [f"--dependency=afterany:{dependency}"] if dependency is not None else []
        words = [*env, shlex.quote(job.argv[0]), *chain, *map(shlex.quote, job.argv[1:])]
        lines.append(f"# {job.label}\nJOB{number}=$({' '.join(words)})")
        dependency = f"${{JOB{number}%%;*}}"  # `--parsable` may print <id>;<cluster>
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m robostream.bench.chain", description=__doc__.split("\n\n")[0])
    parser.add_argument("matrix", type=Path, help="scenario matrix (.toml, or .json)")
    parser.add_argument("--dry-run", action="store_true", help="print the sbatch commands instead of running them")
    parser.add_argument("--after", help="job id the first job waits for (e.g. a prewarm job or an earlier chain)")
    args = parser.parse_args(argv)
    try:
        jobs = plan(load_matrix(args.matrix))
        if args.dry_run:
            print("\n".join(dry_run_lines(jobs, args.after)))
            return 0
        for job, job_id in zip(jobs, submit(jobs, after=args.after)):
            print(f"{job_id}\t{job.label}")
    except (OSError, RobostreamError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
