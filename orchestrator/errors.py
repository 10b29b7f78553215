"""The OrchError tree. Expected failures carry an exit code and a one-line message; bugs stay tracebacks."""

from __future__ import annotations


class OrchError(Exception):
    """Base of every error the CLI turns into a one-line message."""

    exit_code = 1


class SpecError(OrchError):
    """Bad user input: a spec file, a layout string, a catalog name, a config.json."""

    exit_code = 2


class NoLayoutMeetsSLO(OrchError):
    """A valid answer: no candidate layout meets the SLO."""

    exit_code = 3


class UnknownRun(SpecError):
    """A run reference that names no stored run, or more than one (an ambiguous prefix): bad input,
    never the regression code 1 of `orch compare`."""


class InfrastructureError(OrchError):
    """The machinery under the measurement failed, not the layout's performance: an engine that is not
    installed, a Ray or Kubernetes target that cannot be reached, a deployment that could not be
    brought up, an engine that died; in `orch sweep`, no layout could be measured because of such
    failures. Never 3 ("no layout meets the SLO"): a nightly job must not read it as a regression."""

    exit_code = 4


class DeployError(InfrastructureError):
    """A deployment could not be brought up or torn down."""


class EngineDied(DeployError):
    """An engine process exited while it was being waited on or measured."""


class ConsistencyExceeded(OrchError):
    """`orch consistency --max-divergence`: more outputs differ between the layouts than allowed."""

    exit_code = 5


class StoreError(OrchError):
    """The results store cannot be opened, read or written (missing, damaged, locked, read-only, full)."""


class NoRequestCompleted(OrchError):
    """`orch simulate`: not one request completed in the measurement window (nothing to judge)."""

    exit_code = 6


class RequestsFailed(OrchError):
    """`orch bench`: a load point's failed fraction passed --max-error-rate, or none completed.

    The same code as NoRequestCompleted: for a CI job, 6 means "the requests failed"."""

    exit_code = 6


class SLONotMet(OrchError):
    """`orch bench --slo`: a load point missed the SLO (with --search: no rate met it)."""

    exit_code = 7


class DecisionNotSound(OrchError):
    """`orch sweep`: some load points could not be judged (e.g. the served simulation lost its clock)
    even after re-measuring, so the winner printed may not be the right one."""

    exit_code = 8
