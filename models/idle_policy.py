"""The idle policy: where a deployment's idle GPU cost goes (docs/cost-model.md, "Idle policy").

Two types, because there are two questions:

- :class:`IdlePolicy` is what a deployment *is set to* (``deployments.idle_policy``, the YAML
  config, the admin page): separate, usage or even.
- :class:`IdleChoice` is what a *view* asks for (the global "Idle cost" filter, the named
  queries, the task marts): one of the three policies forced on every deployment, or
  ``configured`` — each deployment's own policy applies.

The SQL side of the same choice is the ``by_idle_policy`` macro
(sql/macros/by_idle_policy.sql).
Every label and description of a policy the product shows lives here, once.
"""

from __future__ import annotations

from enum import StrEnum


class IdlePolicy(StrEnum):
    """Where one deployment's idle GPU cost goes."""

    SEPARATE = "separate"
    USAGE = "usage"
    EVEN = "even"


class IdleChoice(StrEnum):
    """The idle policy a view applies: one of the policies forced on every deployment, or
    CONFIGURED, each deployment's own (the default of the global filter)."""

    SEPARATE = "separate"
    USAGE = "usage"
    EVEN = "even"
    CONFIGURED = "configured"


#: Every choice a view accepts ("separate, usage, even, configured" in error messages).
IDLE_CHOICES: tuple[str, ...] = tuple(c.value for c in IdleChoice)
#: The global filter's default: each deployment's configured policy.
DEFAULT_CHOICE = IdleChoice.CONFIGURED

#: Short names (the filter dropdown, the Overview hint).
LABEL: dict[str, str] = {
    IdleChoice.CONFIGURED: "Per deployment",
    IdleChoice.SEPARATE: "Separate line",
    IdleChoice.USAGE: "Shared by usage",
    IdleChoice.EVEN: "Shared evenly",
}

#: What each choice does, in one line.
DESCRIPTION: dict[str, str] = {
    IdleChoice.CONFIGURED: "each deployment's own idle policy applies (set per deployment)",
    IdleChoice.SEPARATE: "idle GPU time is its own line, charged to no team",
    IdleChoice.USAGE: (
        "each deployment-hour's idle is charged to its requests in proportion to their usage"
    ),
    IdleChoice.EVEN: "each deployment-hour's idle is split equally among its requests",
}

#: The phrase after "cost with …" on per-request pages (Requests, Trace).
COST_WITH: dict[str, str] = {
    IdleChoice.CONFIGURED: "each deployment's idle policy",
    IdleChoice.SEPARATE: "idle as a separate line",
    IdleChoice.USAGE: "idle shared by usage",
    IdleChoice.EVEN: "idle shared evenly",
}

#: The admin page's option text for setting one deployment's policy (no "configured": that
#: is what is being set).
SETTING_LABEL: dict[str, str] = {
    IdlePolicy.SEPARATE: "separate — idle is its own line",
    IdlePolicy.USAGE: "usage — shared by the deployment's usage cost",
    IdlePolicy.EVEN: "even — shared equally per request",
}


def choice_options() -> list[dict[str, str]]:
    """Dropdown options for the view's idle choice, short labels, the default first."""
    order = [DEFAULT_CHOICE, *(c for c in IdleChoice if c != DEFAULT_CHOICE)]
    return [{"label": LABEL[c], "value": c.value} for c in order]


def policy_options() -> list[dict[str, str]]:
    """Dropdown options for setting a deployment's policy."""
    return [{"label": SETTING_LABEL[p], "value": p.value} for p in IdlePolicy]
