"""The what-if capacity planner (issue #13): pure models, no I/O. docs/capacity-planner.md."""
